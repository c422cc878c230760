#include "clients/lib/connection.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/str_format.h"

namespace sinew::client {

void QuietGrpcLog() { setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0); }

void ExitNow(int status) {
  std::fflush(nullptr);
  std::_Exit(status);
}

void AddConnectionFlags(Args& args) {
  args.Flag("token", "TOKEN", "", "bearer token for a server run with --token-file (default: $SINEW_TOKEN)")
      .Flag("tls", "", "", "connect with TLS (implied by the --tls-* files)")
      .Flag("tls-ca", "FILE", "", "PEM file of the CA that signed the server's certificate (default: the system's roots)")
      .Flag("tls-cert", "FILE", "", "mutual TLS: this client's certificate chain (PEM), with --tls-key")
      .Flag("tls-key", "FILE", "", "mutual TLS: this client's private key (PEM)")
      .Flag("tls-server-name", "NAME", "", "the name the server's certificate must carry (default: the target's host)")
      .Flag("affinity", "KEY", "",
            "sent as x-sinew-affinity with every call, so that a balancer hashing it (deploy/haproxy.cfg, "
            "deploy/envoy.yaml) keeps this run's calls (its rig, sessions and frames) on one server; default: a "
            "random key per run")
      .Flag("timeout", "SECONDS", "0",
            "each unary call's deadline (not uploads, streams or clips); past it the call fails with "
            "DEADLINE_EXCEEDED and the server stops a long elastic implicit frame. 0: none")
      .Flag("connect-timeout", "SECONDS", "10",
            "how long to wait for the server to accept a connection before the first call (a server still "
            "starting); past it the program fails naming gRPC's reason (connection refused, a TLS handshake), "
            "at once where waiting cannot help (a server certificate not trusted or not for that name, TLS "
            "at a plaintext server). 0: one attempt of at most a second. gRPC's own log lines, which repeat the "
            "reason, are off unless $GRPC_VERBOSITY is set");
}

absl::StatusOr<ClientOptions> ConnectionFromArgs(Args& args) {
  ClientOptions o;
  o.token = args.Get("token");
  if (o.token.empty()) {
    if (const char* env = std::getenv("SINEW_TOKEN")) o.token = env;
  }
  o.tls = args.Has("tls");
  o.tls_ca = args.Get("tls-ca");
  o.tls_cert = args.Get("tls-cert");
  o.tls_key = args.Get("tls-key");
  o.server_name = args.Get("tls-server-name");
  // The name checks the server's certificate: without TLS there is none (until 2026-12-03 the
  // connection silently stayed plaintext).
  if (!o.server_name.empty() && !o.tls && o.tls_ca.empty() && o.tls_cert.empty() && o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-server-name: goes with --tls (or --tls-ca, --tls-cert)");
  }
  o.affinity = args.Get("affinity");
  if (o.affinity.empty()) {
    // Without one, HAProxy's hdr() balancing falls back to round robin per request, and a
    // session's frames reach servers that do not hold it.
    std::random_device random;
    o.affinity = absl::StrFormat("run-%08x%08x", random(), random());
  }
  if (!args.GetDouble("timeout", &o.timeout_seconds, 0, 1e9)) return absl::InvalidArgumentError(args.error());
  if (!args.GetDouble("connect-timeout", &o.connect_timeout_seconds, 0, 1e6)) {
    return absl::InvalidArgumentError(args.error());
  }
  return o;
}

}  // namespace sinew::client
