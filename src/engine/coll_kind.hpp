// The calls an operation can stand for, with the names errors and logs use.
#pragma once

namespace trnccl {

enum class CollKind : int {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllv,
  kBarrier,
  kSendRecv,
  // The MoE engine's calls (src/moe): planned by the engine, never by the planner.
  kMoeDispatch,
  kMoeCombine,
  kCount
};

inline const char* collName(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce: return "AllReduce";
    case CollKind::kAllGather: return "AllGather";
    case CollKind::kReduceScatter: return "ReduceScatter";
    case CollKind::kBroadcast: return "Broadcast";
    case CollKind::kReduce: return "Reduce";
    case CollKind::kAllToAll: return "AllToAll";
    case CollKind::kAllToAllv: return "AllToAllv";
    case CollKind::kBarrier: return "Barrier";
    case CollKind::kSendRecv: return "Send/Recv";
    case CollKind::kMoeDispatch: return "EpDispatch";
    case CollKind::kMoeCombine: return "EpCombine";
    default: return "unknown";
  }
}

}  // namespace trnccl
