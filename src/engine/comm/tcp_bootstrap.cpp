#include "engine/comm/tcp_bootstrap.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>

#include "engine/error.h"

namespace canonlab {

namespace {

using Clock = std::chrono::steady_clock;

// A file descriptor closed on scope exit.
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string where_text(const Rendezvous& w) { return w.host + ":" + std::to_string(w.port); }

// Waits until fd is readable (or writable) or the deadline passes.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void send_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error("rendezvous: sending to " + what + " failed: " + std::strerror(errno));
    p += k;
    n -= size_t(k);
  }
}

void receive_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) throw Error("rendezvous: timed out receiving from " + what);
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error("rendezvous: " + what + " closed the connection early");
    p += k;
    n -= size_t(k);
  }
}

constexpr uint32_t kMagic = 0x43414e4e;  // "CANN": a stray client on the port is refused, not mistaken for a rank

std::vector<std::byte> serve(const Rendezvous& w, const std::vector<std::byte>& blob, Clock::time_point deadline) {
  Socket listener(::socket(AF_INET6, SOCK_STREAM, 0));
  CANONLAB_CHECK(listener.fd() >= 0, std::string("rendezvous: socket() failed: ") + std::strerror(errno));
  const int yes = 1, no = 0;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  ::setsockopt(listener.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);  // IPv4 peers too
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  address.sin6_port = htons(uint16_t(w.port));
  if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    throw Error("rendezvous: rank 0 cannot listen on port " + std::to_string(w.port) + " (MASTER_PORT): " +
                std::strerror(errno) + "; choose a free port");
  ::listen(listener.fd(), 128);
  std::set<int> missing;
  for (int r = 1; r < w.size; r++) missing.insert(r);
  while (!missing.empty()) {
    if (!wait_ready(listener.fd(), POLLIN, deadline)) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      throw Error("rendezvous on " + where_text(w) + ": rank(s) " + list + " did not connect within " +
                  std::to_string(int(w.timeout_seconds)) + " s (did they start? same MASTER_ADDR and MASTER_PORT?)");
    }
    Socket peer(::accept(listener.fd(), nullptr, nullptr));
    if (peer.fd() < 0) continue;
    uint32_t hello[2] = {};
    try {
      receive_all(peer.fd(), hello, sizeof hello, deadline, "a connecting rank");
    } catch (const Error&) {
      continue;
    }
    const int rank = int(hello[1]);
    if (hello[0] != kMagic || !missing.count(rank)) continue;
    const uint64_t n = blob.size();
    send_all(peer.fd(), &n, sizeof n, "rank " + std::to_string(rank));
    send_all(peer.fd(), blob.data(), blob.size(), "rank " + std::to_string(rank));
    missing.erase(rank);
  }
  return blob;
}

std::vector<std::byte> fetch(const Rendezvous& w, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(w.port);
  for (;;) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(w.host.c_str(), port.c_str(), &hints, &found) == 0) {
      for (addrinfo* a = found; a; a = a->ai_next) {
        Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
        if (s.fd() < 0 || ::connect(s.fd(), a->ai_addr, a->ai_addrlen) != 0) continue;
        ::freeaddrinfo(found);
        const uint32_t hello[2] = {kMagic, uint32_t(w.rank)};
        send_all(s.fd(), hello, sizeof hello, "rank 0 at " + where_text(w));
        uint64_t n = 0;
        receive_all(s.fd(), &n, sizeof n, deadline, "rank 0 at " + where_text(w));
        CANONLAB_CHECK(n <= (1u << 20), "rendezvous: rank 0 at " + where_text(w) + " announced " + std::to_string(n) +
                                            " bytes; at most 1 MiB is expected");
        std::vector<std::byte> blob(n);
        receive_all(s.fd(), blob.data(), n, deadline, "rank 0 at " + where_text(w));
        return blob;
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() >= deadline)
      throw Error("rendezvous: rank " + std::to_string(w.rank) + " could not reach rank 0 at " + where_text(w) +
                  " (MASTER_ADDR:MASTER_PORT) within " + std::to_string(int(w.timeout_seconds)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not be listening yet
  }
}

}  // namespace

std::vector<std::byte> share_from_rank_zero(const Rendezvous& where, const std::vector<std::byte>& blob) {
  CANONLAB_CHECK(where.port > 0 && where.port < 65536,
                 "MASTER_PORT: " + std::to_string(where.port) + " is not a TCP port; allowed: 1 to 65535");
  CANONLAB_CHECK(where.size >= 1 && where.rank >= 0 && where.rank < where.size,
                 "rendezvous: rank " + std::to_string(where.rank) + " of " + std::to_string(where.size));
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(int64_t(where.timeout_seconds * 1000));
  if (where.size == 1) return blob;
  return where.rank == 0 ? serve(where, blob, deadline) : fetch(where, deadline);
}

}  // namespace canonlab
