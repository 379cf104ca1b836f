// PeerSocket: notices that the client of an HTTP request has gone away.
//
// cpp-httplib 0.11 (Debian 12) gives a handler no way to ask whether its client is
// still connected, and a streaming handler only learns it when a write fails. The
// router must abort a request whose client disconnected (its decode slot and KV blocks
// are worth freeing at once), so this finds the request's TCP socket among the
// process's descriptors by its two endpoints (Linux /proc/self/fd) and polls it for a
// hang-up (POLLRDHUP covers a FIN even when unread bytes — a TLS close_notify — remain).
//
// Not owning: the descriptor stays httplib's. Cheap enough to poll every few ms.
#ifndef TANDEM_COMMON_HTTP_PEER_SOCKET_H_
#define TANDEM_COMMON_HTTP_PEER_SOCKET_H_

#include <optional>
#include <string>

namespace tandem::http {

class PeerSocket {
 public:
  // The connected socket whose local port is `local_port` and whose peer is
  // remote_addr:remote_port; nullopt if none is found (then Gone() cannot be asked).
  static std::optional<PeerSocket> Find(const std::string& remote_addr, int remote_port,
                                        int local_port);
  // True once the peer has closed or reset the connection.
  bool Gone() const;
  // Ends the connection's reading side: the server's next read sees end of stream (so
  // httplib closes a keep-alive connection once the current response is written).
  void StopReading() const;

 private:
  explicit PeerSocket(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace tandem::http

#endif  // TANDEM_COMMON_HTTP_PEER_SOCKET_H_
