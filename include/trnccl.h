/*
 * trnccl: collective communication for AWS Trainium clusters.
 *
 * The C ABI is the only stable surface of the library. It is shaped after nccl.h so that
 * integrators already know it; the deliberate differences are host-memory buffers (no stream
 * argument), a non-blocking form of every call returning a trncclRequest_t, and
 * trncclGetLastError(comm), which returns a sentence naming the rank, the call and the knob.
 *
 * Thread safety: every call on one communicator may come from any thread; calls on one
 * communicator are executed in the order they are issued. Group state is per thread.
 */
#ifndef TRNCCL_H_
#define TRNCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define TRNCCL_MAJOR 0
#define TRNCCL_MINOR 1
#define TRNCCL_PATCH 0
#define TRNCCL_VERSION_CODE (TRNCCL_MAJOR * 10000 + TRNCCL_MINOR * 100 + TRNCCL_PATCH)

typedef enum {
  trncclSuccess = 0,
  trncclUnhandledSystemError = 1,
  trncclSystemError = 2,
  trncclInternalError = 3,
  trncclInvalidArgument = 4,
  trncclInvalidUsage = 5,
  trncclRemoteError = 6,
  trncclTimeout = 7,
  trncclAborted = 8,
  trncclInProgress = 9,
  trncclNumResults = 10,
  trncclResultForceInt = 0x7fffffff /* keeps any int a valid value (the library validates) */
} trncclResult_t;

typedef enum {
  trncclInt8 = 0,
  trncclUint8 = 1,
  trncclInt32 = 2,
  trncclUint32 = 3,
  trncclInt64 = 4,
  trncclUint64 = 5,
  trncclFloat16 = 6,
  trncclFloat32 = 7,
  trncclFloat64 = 8,
  trncclBfloat16 = 9,
  /* fp8 types are payload-only: valid for data movement, refused by reductions. */
  trncclFloat8e4m3 = 10,
  trncclFloat8e5m2 = 11,
  trncclNumTypes = 12,
  trncclDataTypeForceInt = 0x7fffffff /* keeps any int a valid value (the library validates) */
} trncclDataType_t;

typedef enum {
  trncclSum = 0,
  trncclProd = 1,
  trncclMax = 2,
  trncclMin = 3,
  trncclAvg = 4,
  trncclNumOps = 5,
  trncclRedOpForceInt = 0x7fffffff /* keeps any int a valid value (the library validates) */
} trncclRedOp_t;

#define TRNCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TRNCCL_UNIQUE_ID_BYTES];
} trncclUniqueId;

typedef struct trncclComm* trncclComm_t;
typedef struct trncclRequest* trncclRequest_t;

/* Split colour meaning "this rank joins no new communicator". */
#define TRNCCL_SPLIT_NOCOLOR (-1)
/* Timeout value meaning "use TRNCCL_TIMEOUT". */
#define TRNCCL_TIMEOUT_DEFAULT (-1)

#define TRNCCL_CONFIG_MAGIC 0x74726e63u /* "trnc" */
typedef struct {
  size_t size;           /* sizeof(trncclConfig_t), set by the initializer */
  unsigned int magic;    /* TRNCCL_CONFIG_MAGIC */
  unsigned int version;  /* TRNCCL_VERSION_CODE */
  int blocking;          /* 1: init returns when the communicator is ready (only mode today) */
  int timeoutMs;         /* per-communicator wait bound; TRNCCL_TIMEOUT_DEFAULT = env */
  const char* algorithm; /* like TRNCCL_ALGO; NULL = env / planner */
  const char* commName;  /* shown in logs and errors; NULL = "comm" */
} trncclConfig_t;

#define TRNCCL_CONFIG_INITIALIZER                                                                \
  {                                                                                              \
    sizeof(trncclConfig_t), TRNCCL_CONFIG_MAGIC, TRNCCL_VERSION_CODE, 1, TRNCCL_TIMEOUT_DEFAULT, \
        NULL, NULL                                                                               \
  }

/* ---- version, errors ---- */
trncclResult_t trncclGetVersion(int* version);
const char* trncclGetErrorString(trncclResult_t result);
/* The last error on this communicator (or, for comm == NULL, on this thread): a sentence. */
const char* trncclGetLastError(trncclComm_t comm);

/* ---- environment ---- */
/* A TRNCCL_* variable as trnccl reads it, from its one registry (`trnccl-info --env` prints
 * it): *value is the environment's value when the variable is set (*isSet = 1, even if empty),
 * else its documented default (*isSet = 0). The string stays valid until the environment
 * changes. isSet may be NULL. A name the registry does not hold is trncclInvalidArgument. */
trncclResult_t trncclGetEnv(const char* name, const char** value, int* isSet);

/* ---- communicators ---- */
/* Creates a rendezvous point in this process; pass the id to every rank out of band. */
trncclResult_t trncclGetUniqueId(trncclUniqueId* uniqueId);
/* For programs started by trnccl-run (or any launcher that sets TRNCCL_RANK, TRNCCL_NRANKS
 * and TRNCCL_UNIQUE_ID): this process's rank, the job size and the job's unique id.
 * Returns trncclInvalidUsage, naming the missing or malformed variable, otherwise. */
trncclResult_t trncclGetLaunchInfo(int* rank, int* nranks, trncclUniqueId* uniqueId);
trncclResult_t trncclCommInitRank(trncclComm_t* comm, int nranks, trncclUniqueId commId, int rank);
trncclResult_t trncclCommInitRankConfig(trncclComm_t* comm, int nranks, trncclUniqueId commId,
                                        int rank, const trncclConfig_t* config);
/* Collective over comm. color TRNCCL_SPLIT_NOCOLOR gives *newcomm = NULL. */
trncclResult_t trncclCommSplit(trncclComm_t comm, int color, int key, trncclComm_t* newcomm,
                               const trncclConfig_t* config);
trncclResult_t trncclCommDestroy(trncclComm_t comm);
/* Callable from any thread: every waiter on comm (and on peers' copies) returns trncclAborted
 * or trncclRemoteError, then the communicator is freed. */
trncclResult_t trncclCommAbort(trncclComm_t comm);
trncclResult_t trncclCommGetAsyncError(trncclComm_t comm, trncclResult_t* asyncError);
trncclResult_t trncclCommCount(const trncclComm_t comm, int* count);
trncclResult_t trncclCommUserRank(const trncclComm_t comm, int* rank);

/* ---- buffer registration ---- */
/* Promises that [buff, buff + size) stays valid until trncclCommDeregister, so network
 * transports may keep it registered with the NIC: on EFA (which pins pages) user buffers are
 * otherwise registered per message (TRNCCL_EFA_MR_CACHE). Calls whose buffers lie inside a
 * registered range use its registration. Optional, like ncclCommRegister: calls on buffers that
 * were never registered work too. *handle is this communicator's; several may overlap. */
trncclResult_t trncclCommRegister(const trncclComm_t comm, void* buff, size_t size, void** handle);
/* Releases a registration. trncclInvalidUsage while a call that uses the buffer is still in
 * flight (wait for it first); trncclInvalidArgument for a handle comm did not give out. */
trncclResult_t trncclCommDeregister(const trncclComm_t comm, void* handle);

/* Memory local peers can map (like ncclMemAlloc): each allocation is a shared memory file
 * mapped into this process. When the send buffer of a large all-gather, all-to-all or
 * broadcast lies in one, the peers on this node copy straight out of their own mapping of it
 * (no system call per copy, streaming stores for large copies) where other buffers are read
 * with process_vm_readv; beyond the sizes read with process_vm_readv (TRNCCL_CMA_MAX_BYTES),
 * and larger than one window round, they still do when every rank's buffer is such memory
 * (broadcast: the root's; all-to-all out of place, and all-to-all-v). When every local rank's
 * buffers of a reduce-scatter or reduce (input) or all-reduce (input and output) larger than one
 * window round (TRNCCL_SHM_CHUNK_BYTES) lie in such memory, each rank reduces its part straight out
 * of its peers' inputs, and an all-reduce's ranks copy the reduced parts out of each other's
 * outputs: no staging copy (if one rank's buffer is ordinary memory, all ranks take the staging
 * windows). Nothing else changes, and any call accepts these buffers. MoE calls on one node read
 * them in place too: dispatch's tokens and combine's expert outputs are not staged but read by
 * peers where they lie (docs/MOE.md, direct mode). Needs the same permission as CMA (TRNCCL_CMA);
 * without it such buffers act as ordinary memory. trncclMemFree takes exactly the pointer
 * trncclMemAlloc returned, once (NULL is ignored), and refuses (trncclInvalidUsage) while a queued
 * call still uses the allocation. size > 0; memory is zeroed and page aligned. */
trncclResult_t trncclMemAlloc(void** ptr, size_t size);
trncclResult_t trncclMemFree(void* ptr);

/* ---- requests (non-blocking forms) ---- */
/* *done = 1 when complete; the request is then freed and *request set to NULL. Returns the
 * operation's result once complete. */
trncclResult_t trncclTest(trncclRequest_t* request, int* done);
/* Waits up to timeoutMs (TRNCCL_TIMEOUT_DEFAULT = the communicator's timeout). On completion
 * or error the request is freed and *request set to NULL; on trncclTimeout it stays valid. */
trncclResult_t trncclWait(trncclRequest_t* request, int64_t timeoutMs);

/* ---- collectives (blocking; the *Async form returns a request instead) ---- */
trncclResult_t trncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               trncclDataType_t datatype, trncclRedOp_t op, trncclComm_t comm);
trncclResult_t trncclAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                    trncclDataType_t datatype, trncclRedOp_t op, trncclComm_t comm,
                                    trncclRequest_t* request);

/* sendcount elements per rank; recvbuff holds nranks * sendcount. */
trncclResult_t trncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               trncclDataType_t datatype, trncclComm_t comm);
trncclResult_t trncclAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    trncclDataType_t datatype, trncclComm_t comm,
                                    trncclRequest_t* request);

/* sendbuff holds nranks * recvcount; each rank receives its reduced block of recvcount. */
trncclResult_t trncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   trncclDataType_t datatype, trncclRedOp_t op, trncclComm_t comm);
trncclResult_t trncclReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        trncclDataType_t datatype, trncclRedOp_t op,
                                        trncclComm_t comm, trncclRequest_t* request);

trncclResult_t trncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               trncclDataType_t datatype, int root, trncclComm_t comm);
trncclResult_t trncclBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                    trncclDataType_t datatype, int root, trncclComm_t comm,
                                    trncclRequest_t* request);

/* recvbuff is only written (and only required) on root. */
trncclResult_t trncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                            trncclDataType_t datatype, trncclRedOp_t op, int root,
                            trncclComm_t comm);
trncclResult_t trncclReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                 trncclDataType_t datatype, trncclRedOp_t op, int root,
                                 trncclComm_t comm, trncclRequest_t* request);

/* count elements to and from every rank; buffers hold nranks * count. */
trncclResult_t trncclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              trncclDataType_t datatype, trncclComm_t comm);
trncclResult_t trncclAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                   trncclDataType_t datatype, trncclComm_t comm,
                                   trncclRequest_t* request);

/* Counts and displacements in elements, one entry per rank. sendcounts[j] on rank i must equal
 * recvcounts[i] on rank j; a mismatch is reported as trncclInvalidUsage. */
trncclResult_t trncclAllToAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                               const size_t rdispls[], trncclDataType_t datatype,
                               trncclComm_t comm);
trncclResult_t trncclAllToAllvAsync(const void* sendbuff, const size_t sendcounts[],
                                    const size_t sdispls[], void* recvbuff,
                                    const size_t recvcounts[], const size_t rdispls[],
                                    trncclDataType_t datatype, trncclComm_t comm,
                                    trncclRequest_t* request);

trncclResult_t trncclSend(const void* sendbuff, size_t count, trncclDataType_t datatype, int peer,
                          trncclComm_t comm);
trncclResult_t trncclSendAsync(const void* sendbuff, size_t count, trncclDataType_t datatype,
                               int peer, trncclComm_t comm, trncclRequest_t* request);
trncclResult_t trncclRecv(void* recvbuff, size_t count, trncclDataType_t datatype, int peer,
                          trncclComm_t comm);
trncclResult_t trncclRecvAsync(void* recvbuff, size_t count, trncclDataType_t datatype, int peer,
                               trncclComm_t comm, trncclRequest_t* request);

trncclResult_t trncclBarrier(trncclComm_t comm);
trncclResult_t trncclBarrierAsync(trncclComm_t comm, trncclRequest_t* request);

/* Calls between GroupStart and GroupEnd on this thread are queued and launched together at
 * GroupEnd; point-to-point calls of a group progress concurrently (so a ring of sends and
 * receives cannot deadlock). GroupEnd blocks until the group completes. */
trncclResult_t trncclGroupStart(void);
trncclResult_t trncclGroupEnd(void);

/* Debugging (trnccl extension): what this rank sent to and received from each peer since the
 * communicator was created, and what carried it. Counted per message as sends and receives
 * complete; the direct algorithms' shared-window reads are not messages and are not counted,
 * their single-copy (CMA) reads of a peer's buffer are (as messages received from that peer).
 * Fills up to `capacity` entries (one per rank, this rank included, in rank order) and sets
 * *count to the number of ranks. localChip/peerChip are the Neuron chips the two ranks drive
 * (-1 without Neuron devices). */
typedef enum {
  trncclTransportSelf = 0,
  trncclTransportNeuronLink = 1,
  trncclTransportShm = 2,
  trncclTransportEfa = 3
} trncclTransport_t;
typedef struct {
  int peer;
  trncclTransport_t transport;
  int localChip;
  int peerChip;
  unsigned long long sentMessages, sentBytes, recvMessages, recvBytes;
} trncclPeerTraffic_t;
trncclResult_t trncclCommGetPeerTraffic(trncclComm_t comm, trncclPeerTraffic_t* entries,
                                        int capacity, int* count);

/* Hang diagnosis (trnccl extension): writes this rank's flight recorder -- the communicator's
 * last TRNCCL_FLIGHT_RECORDER_ENTRIES calls, each with its algorithm, state (queued, running
 * step k of n, done, failed), the peer it waits for and its times -- to
 * DIR/trnccl-fr-<communicator key>-rank<R>.txt (dir NULL: TRNCCL_FLIGHT_RECORDER_DIR).
 * With TRNCCL_FLIGHT_RECORDER_DIR set the library also writes it when the communicator fails
 * and on SIGUSR2; `trnccl-inspect DIR` merges all ranks' files into a verdict (the rank that
 * is behind, mismatched calls, the rank everyone waits for). docs/RELIABILITY.md. */
trncclResult_t trncclCommDumpFlightRecorder(trncclComm_t comm, const char* dir);

/* ---- MoE token dispatch and combine (TokenSwitch engine; trnccl extension) ----
 *
 * An expert-parallel (EP) group spreads num_experts experts over the communicator's ranks:
 * rank r owns global experts [r * L, (r + 1) * L), L = numExperts / nranks. Per step, every
 * rank creates a routing from its tokens' top-k expert ids (a collective), dispatches its
 * tokens to the ranks owning their experts, runs its experts on what it received and combines
 * the results back into its tokens' original order. The contract is PyTorch's experimental
 * TokenSwitch (torch.distributed._token_switch); docs/MOE.md states it in full.
 *
 * Layouts of what a rank receives (capacity maxRecvTokensPerRank rows or slots):
 *  - flat: one row per (token, destination rank), however many of the token's experts live
 *    on the rank; rows grouped by source rank, then in the source's token order. Each row's
 *    outTopkIdx ([rows, K] int64) holds the local ids (0..L-1) of this rank's experts among
 *    the token's top-k, ascending, then -1; outWeights ([rows, K] float) the matching weights,
 *    0 where the id is -1.
 *  - expert-major: one slot per (token, local expert), in one contiguous zone per local expert
 *    (zone sizes: trncclEpRoutingGetCounts' perExpertCounts), each zone ordered by source rank
 *    then token; outWeights is [slots] (one weight per slot) and outTopkIdx is not written.
 * Combine returns, per token, the sum over every row or slot that came from it (summed in a
 * fixed order: bitwise the same run to run); rows of tokens that went nowhere are zero. */
typedef struct trncclEpGroup* trncclEpGroup_t;
typedef struct trncclEpRouting* trncclEpRouting_t;

typedef enum {
  trncclEpLayoutFlat = 0,
  trncclEpLayoutExpertMajor = 1,
  trncclEpLayoutForceInt = 0x7fffffff /* keeps any int a valid value (the library validates) */
} trncclEpLayout_t;

/* How a group exchanges tokens. Normal: creating a routing exchanges every rank's counts and
 * ids (two small collectives), after which dispatch sends only rows and weights, and the
 * counts are known before the first dispatch. Low latency (decode-sized batches): creating a
 * routing is local; each dispatch sends every peer its rows' ids and weights in one message of
 * fixed capacity (maxDispatchTokensPerRank rows), then the rows, so the counts are known once
 * the first dispatch has run; outputs must hold the worst case (nranks x
 * maxDispatchTokensPerRank rows, x min(topk, L) slots in expert-major). Auto: a tuning file's
 * entry (trnccl-tune --moe), else low latency when maxDispatchTokensPerRank <= 128 and
 * maxRecvTokensPerRank holds the worst case, else hierarchical when the ranks span nodes, else
 * normal.
 * Hierarchical (multi-node): a token crosses to another node once, to the rank at this rank's
 * position there, which forwards it inside its node; combine sums per node on the way back.
 * Same outputs as normal; fewer bytes between nodes when tokens have several experts there. */
typedef enum {
  trncclEpModeAuto = 0,
  trncclEpModeNormal = 1,
  trncclEpModeLowLatency = 2,
  trncclEpModeHierarchical = 3,
  trncclEpModeForceInt = 0x7fffffff /* keeps any int a valid value (the library validates) */
} trncclEpMode_t;

#define TRNCCL_EP_CONFIG_MAGIC 0x74726e65u /* "trne" */
typedef struct {
  size_t size;                  /* sizeof(trncclEpConfig_t), set by the initializer */
  unsigned int magic;           /* TRNCCL_EP_CONFIG_MAGIC */
  unsigned int version;         /* TRNCCL_VERSION_CODE */
  int numExperts;               /* a multiple of nranks */
  int maxDispatchTokensPerRank; /* most tokens a rank routes per step */
  int maxRecvTokensPerRank;     /* rows (flat) or slots (expert-major) a rank can receive */
  size_t maxTokenBytes;         /* hidden * element size, at most */
  trncclDataType_t payloadType; /* trncclBfloat16, trncclFloat16, trncclFloat32, (for
                                   gradient checks) trncclFloat64, or fp8 (trncclFloat8e4m3,
                                   trncclFloat8e5m2: see trncclEpDispatchScaled) */
  trncclEpMode_t mode;          /* trncclEpModeAuto by default */
} trncclEpConfig_t;

#define TRNCCL_EP_CONFIG_INITIALIZER                                                   \
  {                                                                                    \
    sizeof(trncclEpConfig_t), TRNCCL_EP_CONFIG_MAGIC, TRNCCL_VERSION_CODE, 0, 0, 0, 0, \
        trncclBfloat16, trncclEpModeAuto                                               \
  }

/* Collective over comm; every rank passes the same configuration (checked). The group uses
 * comm for its traffic and must be destroyed before comm. */
trncclResult_t trncclEpGroupCreate(trncclComm_t comm, const trncclEpConfig_t* config,
                                   trncclEpGroup_t* group);
trncclResult_t trncclEpGroupDestroy(trncclEpGroup_t group);

/* Collective over the group. topkIdx: numTokens x topk expert ids (trncclInt32 or trncclInt64,
 * -1 = no expert; no id twice in a row). Exchanges the counts and the ids, so that every later
 * dispatch and combine with this routing knows its layout; fails on every rank alike (naming
 * the rank, the counts and the knob) when some rank would receive more than
 * maxRecvTokensPerRank or passed a bad id. Reusable until destroyed. */
trncclResult_t trncclEpCreateRouting(trncclEpGroup_t group, const void* topkIdx,
                                     trncclDataType_t idxType, size_t numTokens, int topk,
                                     trncclEpLayout_t layout, trncclEpRouting_t* routing);
/* What this rank receives: *numRecv rows (flat) or slots (expert-major); perExpertCounts (may
 * be NULL) gets, per local expert, the (token, expert) pairs received: capacity >= L. In the
 * low-latency mode the counts are known once a dispatch with the routing has run
 * (trncclInvalidUsage before). */
trncclResult_t trncclEpRoutingGetCounts(trncclEpRouting_t routing, size_t* numRecv,
                                        int32_t* perExpertCounts, int capacity);
trncclResult_t trncclEpRoutingDestroy(trncclEpRouting_t routing);

/* tokens: numTokens x hidden elements of the group's payload type; topkWeights: numTokens x
 * topk floats (may be NULL: weights 1). Writes outTokens (numRecv x hidden), outWeights and
 * (flat only, may be NULL) outTopkIdx as the layout says. outCapacity: rows or slots the
 * outputs hold (at least numRecv). */
trncclResult_t trncclEpDispatch(trncclEpRouting_t routing, const void* tokens, size_t hidden,
                                const float* topkWeights, void* outTokens, float* outWeights,
                                int64_t* outTopkIdx, size_t outCapacity);
trncclResult_t trncclEpDispatchAsync(trncclEpRouting_t routing, const void* tokens, size_t hidden,
                                     const float* topkWeights, void* outTokens, float* outWeights,
                                     int64_t* outTopkIdx, size_t outCapacity,
                                     trncclRequest_t* request);
/* fp8 payloads (trnccl extension). A group whose payloadType is trncclFloat8e4m3 or
 * trncclFloat8e5m2 dispatches with trncclEpDispatchScaled (trncclEpDispatch refuses it):
 * tokens are numTokens x hidden fp8 bytes and tokenScales one float per token (the token's
 * value is element x scale; the engine moves both and never converts). Each received row
 * (flat) or slot (expert-major) gets its token's scale in outScales ([numRecv] floats).
 * Experts compute in higher precision, so such a group's combine takes expertTokens and
 * writes out in bf16 (sums of fp8 would lose the precision the scales keep). Other payload
 * types refuse the scaled call. */
trncclResult_t trncclEpDispatchScaled(trncclEpRouting_t routing, const void* tokens,
                                      const float* tokenScales, size_t hidden,
                                      const float* topkWeights, void* outTokens, float* outScales,
                                      float* outWeights, int64_t* outTopkIdx, size_t outCapacity);
trncclResult_t trncclEpDispatchScaledAsync(trncclEpRouting_t routing, const void* tokens,
                                           const float* tokenScales, size_t hidden,
                                           const float* topkWeights, void* outTokens,
                                           float* outScales, float* outWeights, int64_t* outTopkIdx,
                                           size_t outCapacity, trncclRequest_t* request);
/* expertTokens: numRecv x hidden (the experts' outputs, in the dispatch's layout); out:
 * numTokens x hidden; both of the payload type (bf16 for an fp8 group). weighted = 0: the
 * contract's unweighted sum; 1 (expert-major only): each slot is scaled by its dispatch weight
 * inside the engine before the sum. */
trncclResult_t trncclEpCombine(trncclEpRouting_t routing, const void* expertTokens, size_t hidden,
                               void* out, int weighted);
trncclResult_t trncclEpCombineAsync(trncclEpRouting_t routing, const void* expertTokens,
                                    size_t hidden, void* out, int weighted,
                                    trncclRequest_t* request);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TRNCCL_H_ */
