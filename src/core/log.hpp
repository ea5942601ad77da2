// TRNCCL_DEBUG / TRNCCL_DEBUG_SUBSYS / TRNCCL_DEBUG_FILE logging.
#pragma once

namespace trnccl::log {

enum class Level { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum Subsys : unsigned {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kNet = 1u << 2,
  kShm = 1u << 3,
  kTopo = 1u << 4,
  kBoot = 1u << 5,
  kMoe = 1u << 6,
  kAll = ~0u,
};

// Cheap check used by the macros so that disabled logging costs one load and a compare.
bool enabled(Level level, unsigned subsys);

__attribute__((format(printf, 3, 4))) void write(Level level, unsigned subsys, const char* fmt,
                                                 ...);

}  // namespace trnccl::log

#define TRNCCL_LOG(level, subsys, ...)                                                           \
  do {                                                                                           \
    if (::trnccl::log::enabled(level, subsys)) ::trnccl::log::write(level, subsys, __VA_ARGS__); \
  } while (0)
#define TRNCCL_WARN(subsys, ...) TRNCCL_LOG(::trnccl::log::Level::kWarn, subsys, __VA_ARGS__)
#define TRNCCL_INFO(subsys, ...) TRNCCL_LOG(::trnccl::log::Level::kInfo, subsys, __VA_ARGS__)
#define TRNCCL_TRACE(subsys, ...) TRNCCL_LOG(::trnccl::log::Level::kTrace, subsys, __VA_ARGS__)
