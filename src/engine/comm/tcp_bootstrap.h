#pragma once
// The rendezvous of a torchrun-style launch (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): rank 0 listens on the
// port and hands a small blob (NCCL's unique id) to every other rank, which connects, retrying until rank 0 is up.
// It moves bytes once at start-up and is not a collective library: the training traffic is NCCL's.
#include <cstddef>
#include <string>
#include <vector>

namespace canonlab {

struct Rendezvous {
  std::string host;           // MASTER_ADDR (a name or an address)
  int port = 0;               // MASTER_PORT
  int rank = 0, size = 1;
  double timeout_seconds = 300;  // how long rank 0 waits for every peer, and a peer for rank 0
};

// On rank 0 sends `blob` to ranks 1..size-1 and returns it; on the others returns what rank 0 sent (blob is
// ignored). Throws an Error naming host:port and the ranks still missing when the timeout passes.
std::vector<std::byte> share_from_rank_zero(const Rendezvous& where, const std::vector<std::byte>& blob);

}  // namespace canonlab
