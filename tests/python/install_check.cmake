# ctest driver: `cmake --install --component python` into a scratch prefix, import the installed
# package with the build tree out of sight, then remove the prefix.
# -DBUILD_DIR=<build> -DWORK_DIR=<scratch> -DPYTHON=<interpreter> -DSITE=<package dir under the prefix>
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --component python --prefix ${WORK_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install --component python failed (${rc}):\n${out}\n${err}")
endif()
set(ENV{PYTHONPATH} ${WORK_DIR}/${SITE})
set(ENV{PYTHONDONTWRITEBYTECODE} 1)
execute_process(
  COMMAND ${PYTHON} -c "import numpy as np, streamknn as s; assert s.__file__.startswith('${WORK_DIR}'), s.__file__; r = s.ReferenceSet(2, backend='cpu'); r.insert([1], np.zeros((1, 2))); r.publish(); print('installed streamknn', s.__version__, 'at', s.__file__, 'size', len(r))"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK_DIR})
file(REMOVE_RECURSE ${WORK_DIR})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the installed package failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
