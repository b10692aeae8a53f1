#pragma once
// The NCCL backend of the communicator: one CUDA device per rank, buffers in device memory, collectives on one
// stream. The same rank-ordered left fold as the MPI backend (engine/comm/communicator.h): ncclAllReduce is not
// used, because its order depends on the algorithm NCCL picks (ring, tree) and on the topology. Instead
//   1. ncclSend/ncclRecv in one group: rank r receives chunk r of every rank's buffer (a reduce-scatter by
//      all-to-all; chunks of ceil(n / N) elements, the last ones shorter or empty),
//   2. a kernel folds the N received chunks in rank order, one thread per element,
//   3. ncclAllGather of the folded chunks (padded to equal size) and a copy back.
// Each element is summed by exactly one rank in the order 0..N-1, so the bits equal the MPI backend's and one
// process's micro-batch fold. Compiled into canonlab_nccl (CUDA builds that find NCCL); the rendezvous that hands
// every rank the unique id (torchrun's MASTER_ADDR:MASTER_PORT) is engine/comm/tcp_bootstrap.h.
#include <array>
#include <cstddef>
#include <memory>

#include "engine/comm/communicator.h"

namespace canonlab {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // sizeof(ncclUniqueId)
using NcclUniqueId = std::array<std::byte, kNcclUniqueIdBytes>;

// A fresh id (rank 0 makes it and shares it with the others).
NcclUniqueId make_nccl_unique_id();

// Joins the NCCL communicator of `size` ranks identified by `id` on CUDA device `device`. Throws an Error naming the
// NCCL call and its message on failure.
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, const NcclUniqueId& id, int device);

}  // namespace canonlab
