// streamknn/streamknn.hpp — the whole public API in one include.
#pragma once

#include "streamknn/aggregation.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/classifier.hpp"
#include "streamknn/config.hpp"
#include "streamknn/error.hpp"
#include "streamknn/kmeans.hpp"
#include "streamknn/metric.hpp"
#include "streamknn/predicate.hpp"
#include "streamknn/publish_report.hpp"
#include "streamknn/radius.hpp"
#include "streamknn/reference_set.hpp"
#include "streamknn/regressor.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"
#include "streamknn/update.hpp"
#include "streamknn/version.hpp"
