#pragma once
/// \file nvmeio.hpp
/// The umbrella header: everything public in nvmeio.

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/async.hpp"
#include "nvmeio/backend/io_uring.hpp"
#include "nvmeio/backend/libaio.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/batch.hpp"
#include "nvmeio/compare.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/file_modes.hpp"
#include "nvmeio/parallel.hpp"
#include "nvmeio/parallel_context.hpp"
#include "nvmeio/perf.hpp"
#include "nvmeio/strategy.hpp"
#include "nvmeio/stripe.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/verify.hpp"
#include "nvmeio/version.hpp"
