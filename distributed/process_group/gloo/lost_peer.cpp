// LostPeer (see detail/lost_peer.h): the rank behind a Gloo error's address, and the store notice that
// tells a rank's peers why it closed its connections.
#include "distributed/process_group/gloo/detail/lost_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstring>
#include <filesystem>

namespace mt::dist::detail {

// Note [Naming the lost peer]: Gloo's errors name a socket's far end ("Connection closed by peer
// [127.0.0.1]:41234", "Read error [127.0.0.1]:41234: Connection reset by peer"), not a rank, and the
// rank they name is often not the one that failed:
//
// 1. The address. Which address Gloo prints depends on the side of the pair: the one that
//    connected prints the peer's listening address for that pair, published in Gloo's rendezvous
//    (a listener the peer closes once connected), the one that accepted prints the peer's end of
//    the socket, an ephemeral port published nowhere: matching against one kind alone named the
//    rank in only some runs. And Gloo prints a port as the two bytes of sin_port read as a number,
//    not converted from network order: on x86 the socket on port 35435 is "[127.0.0.1]:27530" in
//    its messages. tcp::Pair, which holds the addresses, is not in Debian's Gloo headers (their
//    gloo/common/memory.h is missing), so it cannot be asked. So every rank publishes, once
//    connected, the local end of every TCP socket it has open (getsockname over /proc/self/fd: its
//    Gloo connections, whichever side made them) under "gloo_ends/<rank>", and reads everyone's
//    together with everyone's rendezvous addresses (Gloo's own key "gloo/<rank>"), all printed as
//    Gloo prints them. An address in an error ("[host]:port") then belongs to exactly one rank; the
//    error line gives the port's real number.
//
// 2. Where the failure began. A rank whose collective fails closes all its connections on purpose
//    (Note [A failure closes the connections] in process_group_gloo.cpp), so that its peers fail now
//    rather than at their timeout. Those peers then fail on it, a healthy rank: at 3 ranks, a killed
//    rank 1 makes rank 2 fail on rank 0 whenever rank 0 saw the death first. So before it closes
//    anything, a failing rank leaves a notice in the group's store, "gloo_lost/<its rank>" = the rank
//    its own failure began at. The set is answered by the store's server before the connections
//    close, so a peer that sees them close finds the notice when it looks: no notice means the lost
//    rank failed by itself (it exited, was killed, threw its own error), a notice names where it
//    began. Passed from rank to rank, the origin stays the same, so every survivor's line names the
//    same rank: the one that failed first.
//
// A collective that timed out leaves no notice (the rank it waited for may be hung with the store's
// host: a set would wait the store's whole timeout); its line still names the rank Gloo waited for.
// Where the store itself is gone (rank 0 hosted it and died), the line says the origin is unknown.
namespace {

// Every "[host]:port" in `text`, as "host:port" (an IPv6 host keeps its brackets).
std::vector<std::string> addresses_in(const std::string& text) {
  std::vector<std::string> found;
  for (size_t open = text.find('['); open != std::string::npos; open = text.find('[', open + 1)) {
    const size_t close = text.find(']', open);
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') continue;
    size_t end = close + 2;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == close + 2) continue;
    const std::string host = text.substr(open + 1, close - open - 1);
    const std::string port = text.substr(close + 2, end - close - 2);
    found.push_back((host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + port);
  }
  return found;
}

// "host:port" with the port as Gloo printed it turned into the port's number.
std::string real_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  const int printed = std::stoi(address.substr(colon + 1));
  return address.substr(0, colon + 1) + std::to_string(ntohs(static_cast<uint16_t>(printed)));
}

std::string notice_key(int rank) { return "gloo_lost/" + std::to_string(rank); }

// " [host]:port" as Gloo prints an address (the port's bytes read as a number, above); "" for an
// address of another family.
std::string as_gloo_prints(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = in->sin_port;
  } else if (ss.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = in->sin6_port;
  } else {
    return "";
  }
  return std::string(" [") + host + "]:" + std::to_string(port);
}

// The local end of each TCP socket this process has open: its Gloo connections among them,
// whichever side made them.
std::string own_socket_ends() {
  std::string ends;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ends += as_gloo_prints(ss);
  }
  return ends;
}

// The listening addresses a rank published for its `pairs` pairs in Gloo's rendezvous: one tcp
// address per pair, each a sockaddr_storage then a sequence number (Gloo's layout; a value that does
// not divide into `pairs` such records gives nothing).
std::string rendezvous_addresses(const Bytes& value, int pairs) {
  std::string addresses;
  if (pairs <= 0 || value.size() % static_cast<size_t>(pairs) != 0) return addresses;
  const size_t each = value.size() / static_cast<size_t>(pairs);
  if (each < sizeof(sockaddr_storage)) return addresses;
  for (size_t at = 0; at < value.size(); at += each) {
    sockaddr_storage ss{};
    std::memcpy(&ss, value.data() + at, sizeof ss);
    addresses += as_gloo_prints(ss);
  }
  return addresses;
}

}  // namespace

LostPeer::LostPeer(::gloo::Context& context, std::shared_ptr<Store> store, std::chrono::milliseconds timeout)
    : rank_(context.rank), ends_(static_cast<size_t>(context.size)), store_(std::move(store)) {
  store_->set("gloo_ends/" + std::to_string(rank_), own_socket_ends());
  for (int r = 0; r < context.size; ++r) {
    if (r == rank_) continue;
    const Bytes ends = store_->get("gloo_ends/" + std::to_string(r), timeout);
    const Bytes listening = store_->get("gloo/" + std::to_string(r), timeout);  // Gloo's own key
    ends_[static_cast<size_t>(r)] = addresses_in(std::string(ends.begin(), ends.end()) +
                                                 rendezvous_addresses(listening, context.size - 1));
  }
}

int LostPeer::rank_in(const std::string& message, std::string& address) const {
  for (const std::string& a : addresses_in(message))
    for (size_t r = 0; r < ends_.size(); ++r)
      for (const std::string& end : ends_[r])
        if (end == a) {
          address = a;
          return static_cast<int>(r);
        }
  return -1;
}

std::string LostPeer::explain(const std::string& gloo_message, bool timed_out) {
  std::string address;
  const int lost = rank_in(gloo_message, address);
  if (lost < 0) return "";
  const std::string named = "rank " + std::to_string(lost) + " (" + real_port(address) + ")";
  if (timed_out) return named + " sent nothing: it is hung or dead, or did not issue the same collective";
  int origin = lost;
  std::string unknown;
  try {
    if (store_->check({notice_key(lost)})) origin = std::stoi(store_->get_string(notice_key(lost)));
  } catch (const std::exception& e) {
    unknown = e.what();
  }
  try {
    store_->set(notice_key(rank_), std::to_string(origin));
  } catch (const std::exception&) {
    // The store is gone too; the peers will find no notice, and say so if they cannot reach it either.
  }
  if (!unknown.empty())
    return named + " closed its connection; whether it failed first is unknown (the store that would hold its "
           "notice did not answer: " + unknown + ")";
  if (origin == lost) return named + " closed its connection: it exited, was killed or failed, or the network failed";
  return named + " closed its connections because its own collective had failed on rank " + std::to_string(origin) +
         ": the failure began at rank " + std::to_string(origin);
}

}  // namespace mt::dist::detail
