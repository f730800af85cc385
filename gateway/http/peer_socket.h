// Whether an HTTP client has hung up while its request is still being served. civetweb gives a
// handler no way to ask, and a client that waits for a long answer sends nothing, so the
// connection's socket is found once (the descriptor whose two ends are the request's addresses)
// and asked with poll(POLLRDHUP), which reports the peer's FIN or RST without reading.
#ifndef WALSH_GATEWAY_HTTP_PEER_SOCKET_H_
#define WALSH_GATEWAY_HTTP_PEER_SOCKET_H_

#include <string>

namespace walsh {

class PeerSocket {
 public:
  // The connected TCP socket of this process from `remote_addr`:`remote_port` to local port
  // `local_port`; if none is found, PeerGone() is always false.
  PeerSocket(const std::string& remote_addr, int remote_port, int local_port);

  bool found() const { return fd_ >= 0; }
  bool PeerGone() const;

 private:
  int fd_ = -1;  // not owned: civetweb closes it after the handler returns
};

}  // namespace walsh

#endif  // WALSH_GATEWAY_HTTP_PEER_SOCKET_H_
