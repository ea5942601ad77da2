// Precompiled for every translation unit of the library (meson's cpp_pch): the standard
// headers that most of them include, directly or through core/ and transports/. The library is
// compiled three times in the test suite (release, address+undefined, thread); with this header
// its release build took 160 s of CPU instead of 212 (measured here). A longer list measured
// slower (a bigger header to load per file). Sources still include what they use; build with
// -Db_pch=false to check that they do. No include guard: the compiler only reads it as the
// precompiled header.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>
