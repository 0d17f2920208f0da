# ctest driver: the README's API example must be examples/readme_example.cpp verbatim, so the
# code users copy is the code CI compiles and runs. -DREADME=... -DEXAMPLE=...
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${EXAMPLE} verbatim; paste the file into the README's API example")
endif()
