#include "common/http/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tandem::http {

namespace {

// Address and port of a sockaddr, as httplib formats them.
bool Endpoint(const sockaddr_storage& sa, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf)) == nullptr) return false;
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

}  // namespace

std::optional<PeerSocket> PeerSocket::Find(const std::string& remote_addr, int remote_port,
                                           int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  std::optional<PeerSocket> found;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    sockaddr_storage peer{}, local{};
    socklen_t plen = sizeof(peer), llen = sizeof(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    std::string paddr, laddr;
    int pport = 0, lport = 0;
    if (!Endpoint(peer, &paddr, &pport) || !Endpoint(local, &laddr, &lport)) continue;
    if (pport == remote_port && lport == local_port && paddr == remote_addr) {
      found = PeerSocket(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerSocket::Gone() const {
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) < 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void PeerSocket::StopReading() const { ::shutdown(fd_, SHUT_RD); }

}  // namespace tandem::http
