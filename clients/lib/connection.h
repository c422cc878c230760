// The connection flags every client program takes (--token, --tls, --tls-ca, --tls-cert,
// --tls-key, --tls-server-name, --affinity, --timeout, --connect-timeout) and the ClientOptions
// they make.
#pragma once

#include "absl/status/statusor.h"
#include "clients/lib/args.h"
#include "clients/lib/client.h"

namespace sinew::client {

// Turns gRPC core's own log lines off unless $GRPC_VERBOSITY is set: the programs report every
// failure with gRPC's reason and a hint (a failed TLS handshake, for one, was also logged by gRPC
// core as an "E... Handshake failed" line before the program's message). Call before anything
// starts gRPC; GRPC_VERBOSITY=ERROR (or INFO, DEBUG) brings them back.
void QuietGrpcLog();
// Ends a program with `status` once its output is flushed, without running exit()'s handlers.
// gRPC shuts a channel down in the background: a reconnect attempt could still be starting a TLS
// handshake on one of its threads while exit() ran OpenSSL's cleanup, and the program crashed
// (SIGSEGV after its message, about 1 run in 15 of a mutual TLS connection the server refused,
// until 2026-12-06). Call it from main, after every Client is gone and every file closed.
[[noreturn]] void ExitNow(int status);
// Declares the flags on `args` (after --target).
void AddConnectionFlags(Args& args);
// The options the parsed flags ask for; the token defaults to $SINEW_TOKEN (so that it need not
// appear on a command line, where other users of the machine can read it). INVALID_ARGUMENT
// naming the flag for a malformed --timeout or --connect-timeout.
absl::StatusOr<ClientOptions> ConnectionFromArgs(Args& args);

}  // namespace sinew::client
