"""The Sinew client: connection, rig upload, sessions, frames, streams and batches.

Example::

    import sinew
    with sinew.connect("127.0.0.1:50051") as client:
        rig_id = client.upload_rig(rig).rig_id          # a second upload sends nothing
        with client.create_session(rig_id, method="dqs", encoding="f16") as session:
            xyz = session.deform(pose)                    # (V, 3) float32
            for frame in session.stream(poses):           # pipelined, in order
                use(frame.positions)
"""
from __future__ import annotations

import collections.abc
import hashlib
import numbers
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._proto import pb, pb_grpc
from .codec import PositionDecoder
from .errors import DataLoss, DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, SinewError, error_for, from_rpc_error
from .info import ServerInfo
from .pose import CagePose, Clip, FrameInput, Pose
from .shm import SharedMemoryRegion, frame_bytes

__all__ = ["Client", "Session", "Frame", "ClipFrame", "UploadResult", "connect", "method_name", "method_value",
           "ENCODINGS", "BACKENDS", "CLOSE_TIMEOUT"]

ENCODINGS: Dict[str, int] = {
    "f32": pb.OUTPUT_ENCODING_FLOAT32, "float32": pb.OUTPUT_ENCODING_FLOAT32,
    "f16": pb.OUTPUT_ENCODING_FLOAT16, "float16": pb.OUTPUT_ENCODING_FLOAT16,
    "q16": pb.OUTPUT_ENCODING_QUANTIZED16, "quantized16": pb.OUTPUT_ENCODING_QUANTIZED16,
    "delta": pb.OUTPUT_ENCODING_DELTA,
}
BACKENDS: Dict[str, int] = {"auto": pb.BACKEND_AUTO, "cpu": pb.BACKEND_CPU, "gpu": pb.BACKEND_GPU}
# Seconds a Session.close (and RecoveringSession.close) waits at most, whatever the client's
# timeout (a shorter one applies): the C++ client's CloseSession bound.
CLOSE_TIMEOUT = 10.0

# Methods whose sessions are stateful whatever their parameters, and those made stateful by one
# of theirs (the server's MethodInfo.stateful and stateful_with), for Session._stateful.
_STATEFUL_METHODS = (pb.METHOD_SUPERCAGES, pb.METHOD_ELASTIC_IMPLICIT)
_STATEFUL_WITH: Dict[int, Tuple[str, str]] = {pb.METHOD_PBS: ("pbs", "jiggle"),
                                              pb.METHOD_SWING_TWIST: ("swing_twist", "unwrap_twist")}

ProgressFn = Callable[[int, int], None]
PoseLike = Union[Pose, "pb.Pose"]
FrameLike = Union[Pose, "pb.Pose", FrameInput, "pb.DeformRequest"]  # what a stream takes per frame
Params = Mapping[str, Any]


def method_value(name: str) -> int:
    """``"elastic-implicit"`` -> ``METHOD_ELASTIC_IMPLICIT``: any method the proto names."""
    wire = "METHOD_" + name.strip().upper().replace("-", "_")
    if wire == "METHOD_UNSPECIFIED" or wire not in pb.Method.keys():
        names = ", ".join(method_name(v) for v in pb.Method.values() if v != pb.METHOD_UNSPECIFIED)
        raise InvalidArgument(f"method: {name!r} is not a method of sinew.v1 ({names})")
    return pb.Method.Value(wire)


def method_name(value: int) -> str:
    """``METHOD_CAGE_MVC`` -> ``"cage-mvc"``; ``"?"`` for unspecified or unknown values."""
    if value == pb.METHOD_UNSPECIFIED or value not in pb.Method.values():
        return "?"
    return pb.Method.Name(value)[len("METHOD_"):].lower().replace("_", "-")


def _enum_prefix(type_name: str) -> str:
    """``"JointOperator"`` -> ``"JOINT_OPERATOR_"``."""
    out = "".join("_" + c if i and c.isupper() else c for i, c in enumerate(type_name))
    return out.upper() + "_"


def _set_fields(message, values: Params, where: str) -> None:
    """Sets a message's fields from a dict, by reflection: numbers, bools, enum values as words
    (``"clean-union"``) or numbers, nested messages as dicts, repeated fields as lists."""
    if not isinstance(values, Mapping):
        # (Until 2026-12-01 a list item or nested message given as a number raised a bare
        # AttributeError naming neither the field nor the index.)
        raise InvalidArgument(f"{where}: expected a dict of {message.DESCRIPTOR.name}'s fields, "
                              f"not {type(values).__name__} {values!r}")
    fields = message.DESCRIPTOR.fields_by_name
    for key, value in values.items():
        f = fields.get(key)
        if f is None:
            raise InvalidArgument(f"{where}.{key}: not a parameter of this method (parameters: {', '.join(fields) or 'none'})")
        name = f"{where}.{key}"

        def convert(v, f=f, name=name):
            if f.type == f.TYPE_ENUM:
                if isinstance(v, str):
                    word = v.strip().upper().replace("-", "_")
                    for candidate in (word, _enum_prefix(f.enum_type.name) + word):
                        if candidate in f.enum_type.values_by_name:
                            return f.enum_type.values_by_name[candidate].number
                    choices = ", ".join(e.name[len(_enum_prefix(f.enum_type.name)):].lower().replace("_", "-")
                                        for e in f.enum_type.values)
                    raise InvalidArgument(f"{name}: {v!r} is not one of {choices}")
                return int(v)
            return v

        try:
            if f.label == f.LABEL_REPEATED:
                target = getattr(message, key)
                if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
                    raise InvalidArgument(f"{name}: expected a list, not {type(value).__name__} {value!r}")
                for index, item in enumerate(value):
                    if f.type == f.TYPE_MESSAGE:
                        _set_fields(target.add(), item, f"{name}[{index}]")
                    else:
                        target.append(convert(item, name=f"{name}[{index}]"))
            elif f.type == f.TYPE_MESSAGE:
                _set_fields(getattr(message, key), value, name)
            else:
                setattr(message, key, convert(value))
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"{name}: {e}") from e


@dataclass
class UploadResult:
    """What ``Client.upload_rig`` did: the rig's id, whether the server held it already (then no
    chunk was sent), the bytes sent, and the server's description of the rig."""

    rig_id: str
    already_resident: bool
    bytes_sent: int
    info: Any  # sinew.v1.RigInfo


@dataclass
class Frame:
    """One deformed frame: its number, positions (V, 3) float32 (None for a failed or skipped
    frame), the method that produced it (a method's fallback while its preparation runs; a
    pipeline's frames name the pipeline, ``"dqs+implicit"``), the
    server's compute time, and for streamed frames that failed, the error (raised unless the stream
    was asked to yield errors)."""

    frame: int
    positions: Optional[np.ndarray]
    method: str
    compute_ns: int
    skipped: bool = False
    error: Optional[SinewError] = None
    response: Any = None  # the sinew.v1.DeformResponse

    # What FrameInput.outputs asked for, decoded from the response (None when absent).

    def _xyz(self, name: str) -> Optional[np.ndarray]:
        data = getattr(self.response, name) if self.response is not None else b""
        if not data:
            return None
        if len(data) % 12:
            raise DataLoss(f"frame {self.frame}: {name}: {len(data)} bytes, not float32 x,y,z", frame=self.frame)
        return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(-1, 3)

    @property
    def joints(self) -> Optional[np.ndarray]:
        """Joint positions (J, 3) float32 (``outputs={"joints": True}``)."""
        return self._xyz("joints")

    @property
    def posed_cage(self) -> Optional[np.ndarray]:
        """The fitted current-pose cage C' (C, 3) float32 (``outputs={"posed_cage": True}``)."""
        return self._xyz("posed_cage")

    @property
    def rest_cage(self) -> Optional[np.ndarray]:
        """The session's rest cage C (C, 3) float32 (``outputs={"rest_cage": True}``)."""
        return self._xyz("rest_cage")

    @property
    def base_points(self) -> Optional[np.ndarray]:
        """Baseline skinning's base points (N, 3) float32 (``outputs={"base_points": True}``)."""
        return self._xyz("base_points")

    @property
    def vertex_states(self) -> Optional[np.ndarray]:
        """Implicit methods' state of each vertex (N,) uint8 (``outputs={"vertex_states": True}``;
        0 outside every field, 1 converged, 2 stopped at a contact, 3 null gradient, 4 iteration
        limit, 5 lost track)."""
        data = self.response.vertex_states if self.response is not None else b""
        return np.frombuffer(data, dtype=np.uint8).copy() if data else None

    @property
    def normals(self) -> Optional[np.ndarray]:
        """Per-vertex normals (N, 3) float32 (``outputs={"normals": True}``), from any
        ``normal_encoding``: float32 (12 bytes a vertex), float16 (6) or octahedral (4: snorm16
        u, v, decoded as the server's ``DecodeOctahedral``)."""
        if self.response is None or not self.response.normals:
            return None
        data, n = self.response.normals, self.response.vertex_count
        if len(data) == 12 * n:
            return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(n, 3)
        if len(data) == 6 * n:
            return np.frombuffer(data, dtype="<f2").astype(np.float32).reshape(n, 3)
        if len(data) == 4 * n:
            uv = np.maximum(np.frombuffer(data, dtype="<i2").reshape(n, 2).astype(np.float32) / np.float32(32767),
                            np.float32(-1))
            u, w = uv[:, 0], uv[:, 1]
            z = np.float32(1) - np.abs(u) - np.abs(w)
            sign_u = np.where(u >= 0, np.float32(1), np.float32(-1))
            sign_w = np.where(w >= 0, np.float32(1), np.float32(-1))
            x = np.where(z < 0, (np.float32(1) - np.abs(w)) * sign_u, u)
            y = np.where(z < 0, (np.float32(1) - np.abs(u)) * sign_w, w)
            xyz = np.stack([x, y, z], axis=1).astype(np.float32)
            return (xyz / np.sqrt((xyz * xyz).sum(axis=1, dtype=np.float32))[:, None]).astype(np.float32)
        raise DataLoss(f"frame {self.frame}: normals: {len(data)} bytes for {n} vertices", frame=self.frame)

    @property
    def quality(self) -> Any:
        """The geometric ``sinew.v1.QualityReport`` (``outputs={"quality": True}``)."""
        return self.response.quality if self.response is not None and self.response.HasField("quality") else None


@dataclass
class ClipFrame:
    """One frame of a batch: its index in the whole clip, the clip's frame count, its clip time
    (0 for pose lists), positions (V, 3) float32 and the method that produced it (as
    ``Frame.method``: the method's fallback until its preparation is done, see
    :meth:`Session.wait_prepared`)."""

    frame: int
    total_frames: int
    time_seconds: float
    positions: np.ndarray
    method: str = ""


def _read(path: Optional[str], what: str) -> Optional[bytes]:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgument(f"{what}: cannot read {path}: {e.strerror}") from e


def _why_waiting_cannot_help(reason: str, tls: bool) -> str:
    """What a failed connection attempt's reason (gRPC's, from OpenSSL) says that waiting will not
    change, naming the argument to change; "" where a later attempt may succeed (no server yet,
    one restarting). As the C++ client's (clients/lib/client.cc)."""
    if "certificate verify failed" in reason:
        return "not retried: the server's certificate is not signed by a CA this client trusts: tls_ca"
    if "is not in peer certificate" in reason:
        return "not retried: the server's certificate is not for that name: server_name"
    if tls and "wrong version number" in reason:
        return "not retried: the server does not speak TLS: connect without tls and the tls_* files"
    return ""


def _closed_unanswered_hint(reason: str, tls: bool, client_certificate: bool) -> str:
    """A connection closed unanswered: what it can mean (a server that stopped closes so too).
    Only for a call that never connected ("failed to connect"): one closed mid-call is not this."""
    if "failed to connect" not in reason or "Socket closed" not in reason:
        return ""
    if not tls:
        return "a server that expects TLS closes plaintext connections so: tls"
    if not client_certificate:
        return "a server that asks for client certificates closes connections without one so: tls_cert and tls_key"
    return "a server that does not trust this client's certificate closes the connection so"


def _deadline(timeout: Optional[float]) -> Optional[float]:
    """Seconds as grpcio's `timeout`: None for no deadline (None or 0), checked. grpcio takes 0 as
    a deadline of now, where the C++ client's 0 means none: every call of a Client(timeout=0)
    failed DeadlineExceeded until 2026-12-03, and a call given timeout=0 until 2026-12-07."""
    if timeout is not None and not (timeout >= 0 and timeout != float("inf")):
        raise InvalidArgument(f"timeout: {timeout}; expected seconds >= 0 (0 or None: no deadline)")
    return timeout if timeout else None


class Client:
    """A connection to a Sinew server (``HOST:PORT``), made lazily, with unlimited message sizes.

    Options match the C++ client's ``ClientOptions``:

    * `token`: bearer token for a server run with ``--token-file``, sent with every call (default:
      ``$SINEW_TOKEN`` when set; pass ``""`` for none);
    * `tls`: connect with TLS (implied by any of the files); `tls_ca`: PEM file of the CA that
      signed the server's certificate (default: the system's roots); `tls_cert` / `tls_key`: this
      client's certificate chain and key for mutual TLS (together); `server_name`: the name to check
      the server's certificate against (default: the target's host; TLS only:
      :class:`~sinew.errors.InvalidArgument` without it);
    * `affinity`: sent as ``x-sinew-affinity`` with every call so that a balancer hashing it keeps
      this client's calls on one server;
    * `timeout`: seconds for each unary call (default: none; 0 is none too, as the C++ client's
      ``ClientOptions::timeout_seconds``); not for uploads, streams or clips, whose length follows
      their size;
    * `keepalive`: while a call is open, the connection is pinged after this many seconds without
      traffic and the call fails :class:`~sinew.errors.Unavailable` when the ping goes unanswered
      as long again, so that a server that vanished without closing the connection ends a stream
      or a call without a deadline instead of hanging it (default 30; 0: off). The server accepts
      pings every 10 s or more: below that, a call silent for that long (an idle stream) is
      dropped with GOAWAY "too_many_pings" (tests use 1 s against a stopped server).
    """

    def __init__(self, target: str, *, token: Optional[str] = None, tls: bool = False, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None, server_name: Optional[str] = None,
                 affinity: Optional[str] = None, timeout: Optional[float] = None, keepalive: float = 30.0) -> None:
        self.target = target
        self.timeout = _deadline(timeout)
        if not (keepalive >= 0):
            raise InvalidArgument(f"keepalive: {keepalive}; expected seconds >= 0 (0: off)")
        if token is None:
            token = os.environ.get("SINEW_TOKEN", "")
        self._metadata: List[Tuple[str, str]] = []
        if token:
            self._metadata.append(("authorization", "Bearer " + token))
        if affinity:
            self._metadata.append(("x-sinew-affinity", affinity))
        options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", -1),
                                          ("grpc.max_send_message_length", -1)]
        if keepalive > 0:
            ms = int(min(keepalive * 1000, 2**31 - 1))
            options += [("grpc.keepalive_time_ms", ms), ("grpc.keepalive_timeout_ms", ms),
                        ("grpc.keepalive_permit_without_calls", 0), ("grpc.http2.max_pings_without_data", 0)]
        self._tls = bool(tls or tls_ca or tls_cert or tls_key)
        self._client_certificate = bool(tls_cert)
        if server_name and not self._tls:
            # The name is checked against the server's certificate: a plaintext connection has
            # none (until 2026-12-07 it was ignored and the connection silently stayed plaintext).
            raise InvalidArgument("server_name: the name TLS checks the server's certificate against; it goes with "
                                  "tls=True (or tls_ca, tls_cert): without TLS the connection is plaintext")
        if self._tls:
            if bool(tls_cert) != bool(tls_key):
                raise InvalidArgument("tls: give the client certificate and its key together")
            credentials = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca, "tls_ca"),
                                                       private_key=_read(tls_key, "tls_key"),
                                                       certificate_chain=_read(tls_cert, "tls_cert"))
            if server_name:
                options.append(("grpc.ssl_target_name_override", server_name))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self.stub = pb_grpc.SinewStub(self._channel)
        self._connected_once = False  # a call has been made: later ones are not retried (see _call)
        self._closed = False
        self._info: Optional[Any] = None

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def metadata(self) -> List[Tuple[str, str]]:
        """The metadata sent with every call (token, affinity)."""
        return list(self._metadata)

    def _check_open(self) -> None:
        """A closed client's calls fail as every failed call does, with a SinewError (gRPC's own
        is a ValueError, which the callers that tolerate an unreachable server let through)."""
        if self._closed:
            raise FailedPrecondition("client: closed (Client.close); connect again")

    def _call(self, rpc: Callable, request: Any, timeout: Optional[float] = None, bounded: bool = True) -> Any:
        """One call: `timeout` (0: none, as the client's), else the client's unary deadline where
        `bounded` (else none)."""
        self._check_open()
        if timeout is not None:
            timeout = _deadline(timeout)
        elif bounded:
            timeout = self.timeout
        first_call, self._connected_once = not self._connected_once, True
        started = time.monotonic()
        try:
            return rpc(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            if not (first_call and self._retry_unconnected(e, request, timeout)):
                raise self._error(e) from None
        # Within the call's own deadline (until 2026-12-03 the retry had the whole of it again).
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        try:
            return rpc(request, metadata=self._metadata, timeout=left)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _error(self, e: grpc.RpcError) -> SinewError:
        """A failed call's exception (from_rpc_error); for a call that could not connect for a
        reason of this client's arguments (the server's certificate not trusted or not for the
        name asked, TLS at a plaintext server, a connection closed unanswered as a TLS server
        closes plaintext ones) the reason is followed by a hint naming the argument to change,
        as wait_ready's is."""
        error = from_rpc_error(e)
        if error.code != grpc.StatusCode.UNAVAILABLE:
            return error
        hint = self._connection_hint(error.message)
        return error_for(error.code, f"{error.message} ({hint})") if hint else error

    def _connection_hint(self, reason: str) -> str:
        """What a failed connection attempt's reason says to change, for this client's TLS
        arguments ("" where it says nothing)."""
        return (_why_waiting_cannot_help(reason, self._tls)
                or _closed_unanswered_hint(reason, self._tls, self._client_certificate))

    def _first_connection(self) -> None:
        """Before a client's first call that is a stream or a batch (which cannot be sent again:
        its requests may have been read): waits up to two seconds for the channel to connect, as
        a first unary call is retried (_retry_unconnected); no server there, it goes on and fails."""
        if self._connected_once:
            return
        self._connected_once = True
        try:
            grpc.channel_ready_future(self._channel).result(timeout=2)
        except grpc.FutureTimeoutError:
            pass

    def _retry_unconnected(self, e: grpc.RpcError, request: Any, timeout: Optional[float]) -> bool:
        """Whether a client's first call is sent once more. gRPC fails a call at once when its
        channel's connection attempt fails, and one attempt on loopback did with a listening server
        ("connect: No such file or directory", seen by the C++ client): a call that never left
        ("failed to connect") goes again when the channel connects within two seconds (gRPC's
        reconnect backoff is about one); with no server there it fails as before, that much later.
        Not a streamed request: its iterator may have been read."""
        if (e.code() != grpc.StatusCode.UNAVAILABLE or "failed to connect" not in (e.details() or "")
                or isinstance(request, collections.abc.Iterator)):
            return False
        if _why_waiting_cannot_help(e.details() or "", self._tls):
            return False  # every attempt fails so (until 2026-12-06 it waited two seconds to fail again)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=2 if timeout is None else min(2, timeout))
        except grpc.FutureTimeoutError:
            return False
        return True

    def close(self) -> None:
        """Closes the channel (calls in progress are cancelled); later calls raise
        :class:`~sinew.errors.FailedPrecondition`."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the channel is connected; :class:`~sinew.errors.Unavailable` after `timeout`
        and one more attempt of at most a second, with gRPC's reason for the last failed attempt
        (connection refused, a TLS handshake). A timeout of 0 is that one attempt. Where waiting
        cannot help (the server's certificate not trusted or not for the name asked, TLS at a
        plaintext server) it fails at the first failed attempt, with a hint. A closed client
        raises :class:`~sinew.errors.FailedPrecondition`, as its calls do."""
        from .errors import Unavailable
        self._check_open()

        def probe(seconds: float) -> Optional[str]:
            # A call fails at once with gRPC's reason for the last failed attempt while the
            # channel is in TRANSIENT_FAILURE (a channel's state has none); where the channel has
            # not tried yet it starts an attempt. Any answer of the server's, an UNAUTHENTICATED
            # one too (the probe carries no token), means it is there: None.
            try:
                self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=seconds)
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return e.details() or ""
            return None

        def failed(reason: str, waited: str) -> Unavailable:
            hint = self._connection_hint(reason)
            return Unavailable(f"cannot connect to {self.target}{waited}" + (f": {reason}" if reason else "")
                               + (f" ({hint})" if hint else ""))

        # Probes ten times a second, and gives up at once where a failed attempt's reason says no
        # later one can succeed (until 2026-12-06 a client that did not trust the server's
        # certificate waited all of `timeout`). A probe fails at once while gRPC waits to
        # reconnect, and waits for an attempt in progress or the server's answer (up to a second,
        # so that a distant server's answers count). Not through channel.subscribe: a client
        # unsubscribed just before the interpreter exits hangs the exit in grpcio 1.51 (its
        # channel's finaliser waits for the connectivity poller).
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            started = time.monotonic()
            if started >= deadline:
                break
            reason = probe(min(1.0, max(deadline - started, 0.05)))
            if reason is None:
                return
            if _why_waiting_cannot_help(reason, self._tls):
                raise failed(reason, "")
            time.sleep(max(0.0, min(started + 0.1, deadline) - time.monotonic()))
        reason = probe(1.0)  # one call more, of at most a second, for the last attempt's reason
        if reason is None:
            return
        raise failed(reason, f" within {timeout:g} s")

    # -- server and rigs --------------------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """The server's version, methods (``info.methods["pbs"].params["iterations"]``: their
        parameters with types, defaults and choices, inputs, backends, pipeline roles), backends,
        encodings, limits and load, as a :class:`~sinew.info.ServerInfo` (``.proto``: the
        ``sinew.v1.ServerInfo`` message)."""
        self._info = ServerInfo.from_proto(self._call(self.stub.GetServerInfo, pb.GetServerInfoRequest()))
        return self._info

    def shared_memory(self, size: int) -> SharedMemoryRegion:
        """A POSIX shared-memory region of `size` bytes registered with the server, for frames
        on the server's host (the server must run with ``--shared-memory-bytes``; otherwise
        :class:`~sinew.errors.FailedPrecondition`). ``Session.frame_bytes(n)`` sizes it for n
        frames. Close it (or use ``with``) to unregister and unlink it."""
        return SharedMemoryRegion(self, size)

    def wait_prepared(self, rig_id: str, timeout: Optional[float] = None,
                      progress: Optional[Callable[[float, str], None]] = None, poll: float = 0.05,
                      keys: Optional[Iterable[str]] = None) -> Any:
        """Waits until every per-rig preparation of a rig is done (``RigInfo.preparations``:
        cage coordinates, implicit fields, pbs's tets, ...), or only those named in `keys`
        (:meth:`Session.wait_prepared` gives its session's). Methods with a fallback (swing-twist,
        pbs) serve it meanwhile (``Frame.method`` says), and their state cannot be saved yet.
        `progress(fraction, key)` for each preparation still running, every `poll` seconds.
        Returns the ``sinew.v1.RigInfo``; :class:`~sinew.errors.FailedPrecondition` with the
        error of a preparation that failed (a failure is kept on the rig until
        :meth:`cancel_preparation`, so without `keys` one of other parameters fails this too),
        :class:`~sinew.errors.DeadlineExceeded` after `timeout`."""
        wanted = None if keys is None else set(keys)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.get_rig(rig_id)
            mine = [p for p in info.preparations if wanted is None or p.key in wanted]
            failed = [p for p in mine if p.error]
            if failed:
                raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                                f"rig {rig_id[:12]}: preparing {failed[0].key} failed: {failed[0].error}")
            running = [p for p in mine if not p.done]
            if not running:
                return info
            if progress:
                for p in running:
                    progress(p.progress, p.key)
            if deadline is not None and time.monotonic() > deadline:
                raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"rig {rig_id[:12]}: {running[0].key} still preparing after {timeout:g} s "
                                f"({100 * running[0].progress:.0f}%)")
            time.sleep(poll)

    def cancel_preparation(self, rig_id: str, key: str) -> Any:
        """Stops a running per-rig preparation (``RigInfo.preparations[].key``) or forgets a failed
        one so that the next session retries it; returns the ``sinew.v1.Preparation`` as it was."""
        return self._call(self.stub.CancelPreparation, pb.CancelPreparationRequest(rig_id=rig_id, key=key))

    def upload_rig(self, rig: Any, progress: Optional[ProgressFn] = None,
                   chunk_bytes: int = 1 << 20) -> UploadResult:
        """Uploads a ``sinew.v1.Rig`` (see :func:`sinew.build_rig`), or one already serialized
        (``bytes``), unless the server already holds it: the rig id is the SHA-256 of the
        deterministic serialization, asked for first (``GetRig``), so a second upload of the same
        rig costs one small round trip. Otherwise sends a header (size, SHA-256) and the bytes in
        chunks of `chunk_bytes`; `progress(sent, total)` after each chunk."""
        data = rig if isinstance(rig, (bytes, bytearray)) else rig.SerializeToString(deterministic=True)
        data = bytes(data)
        rig_id = hashlib.sha256(data).hexdigest()
        try:
            info = self.get_rig(rig_id)
            if progress:
                progress(len(data), len(data))
            return UploadResult(rig_id, True, 0, info)
        except SinewError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise
        chunk_bytes = max(1, int(chunk_bytes))
        sent = [0]
        # What `progress` raised: it runs on gRPC's thread, which would turn it into a gRPC error
        # (until 2026-12-03); the upload stops there and the caller gets the exception itself.
        raised: List[BaseException] = []

        def requests() -> Iterator[Any]:
            yield pb.UploadRigRequest(header=pb.UploadHeader(total_bytes=len(data), sha256=rig_id))
            view = memoryview(data)
            for off in range(0, len(data), chunk_bytes):
                chunk = view[off:off + chunk_bytes]
                yield pb.UploadRigRequest(chunk=bytes(chunk))
                sent[0] = off + len(chunk)
                if progress:
                    try:
                        progress(sent[0], len(data))
                    except BaseException as e:  # noqa: B902 - handed to the caller below
                        raised.append(e)
                        return

        try:
            resp = self._call(self.stub.UploadRig, requests(), bounded=False)  # as long as its bytes take
        except SinewError:
            if raised:
                raise raised[0] from None
            raise
        if raised:
            raise raised[0]
        if resp.rig_id != rig_id:
            raise DataLoss(f"upload: the server's rig id {resp.rig_id} is not the bytes' SHA-256 {rig_id}")
        return UploadResult(resp.rig_id, resp.already_resident, sent[0], resp.info)

    def get_rig(self, rig_id: str) -> Any:
        """``sinew.v1.RigInfo`` of a resident rig (:class:`~sinew.errors.NotFound` otherwise)."""
        return self._call(self.stub.GetRig, pb.GetRigRequest(rig_id=rig_id))

    def list_rigs(self) -> List[Any]:
        """Every resident rig of this tenant (``sinew.v1.RigInfo``)."""
        return list(self._call(self.stub.ListRigs, pb.ListRigsRequest()).rigs)

    def delete_rig(self, rig_id: str) -> None:
        """Removes a rig (:class:`~sinew.errors.FailedPrecondition` while sessions use it)."""
        self._call(self.stub.DeleteRig, pb.DeleteRigRequest(rig_id=rig_id))

    # -- sessions ---------------------------------------------------------------------------------

    def _params_field(self, method: int) -> str:
        info = self._info or self.server_info()
        m = info.find_method(method)
        if m is None:
            raise InvalidArgument(f"method: this server has no method {method_name(method)}")
        return m.params_field

    def deformer_config(self, method: str = "lbs", params: Optional[Mapping[Any, Any]] = None) -> Any:
        """``sinew.v1.DeformerConfig`` for a method name (``"dqs"``) or a pipeline (``"dqs+implicit"``)
        with its parameters by the names ``GetServerInfo`` lists (``{"sigma": 0.3,
        "default_operator": "bulge"}``; for a pipeline keyed by stage method or index:
        ``{"implicit": {"sigma": 0.3}}``)."""
        stages = [s for s in method.split("+")]
        config = pb.DeformerConfig()
        params = dict(params or {})

        def one(cfg: Any, name: str, p: Params) -> None:
            value = method_value(name)
            cfg.method = value
            field = self._params_field(value) if p or len(stages) == 1 else ""
            if field:
                getattr(cfg, field).SetInParent()  # the method's own message, even when empty
                _set_fields(getattr(cfg, field), p, f"params.{name}" if len(stages) > 1 else "params")
            elif p:
                raise InvalidArgument(f"params: method {name} takes no parameters")

        if len(stages) == 1:
            one(config, stages[0], params)
            return config
        used = set()
        for i, name in enumerate(stages):
            p = {}
            for key in (i, str(i), name.strip()):
                if key in params:
                    p = params[key]
                    used.add(key)
            one(config.stages.add(), name.strip(), p)
        unknown = set(params) - used
        if unknown:
            raise InvalidArgument(f"params: {sorted(map(str, unknown))} name no stage of {method}")
        return config

    def create_session(self, rig_id: str, method: str = "lbs", params: Optional[Mapping[Any, Any]] = None, *,
                       backend: str = "auto", encoding: str = "f32", max_error: float = 0.0,
                       key_frame_interval: int = 0, expected_joint_names: Optional[Sequence[str]] = None,
                       latest_pose_wins: bool = False, timeout: Optional[float] = None) -> "Session":
        """Opens a session on a resident rig.

        `method`: a method name (``lbs``, ``dqs``, ``blend``, ``implicit``, ``elastic-implicit``,
        ``swing-twist``, ``pbs``, ``cage-mvc``, ...) or a pipeline ``a+b``; `params`: its parameters
        (see :meth:`deformer_config`); `backend`: ``auto``, ``cpu`` or ``gpu``; `encoding`: ``f32``,
        ``f16``, ``q16`` or ``delta`` (with `max_error`, a fraction of the rig's bounding-box
        diagonal, default 1e-4, and `key_frame_interval`, default 30); `expected_joint_names`:
        checked against the rig. Methods with a per-rig preparation (cages, implicit skinning) may
        take a while the first time; `timeout` (seconds) bounds it: None, the client's `timeout`;
        0, no deadline (as the client's 0)."""
        if encoding not in ENCODINGS:
            raise InvalidArgument(f"encoding: {encoding!r}; expected f32, f16, q16 or delta")
        if backend not in BACKENDS:
            raise InvalidArgument(f"backend: {backend!r}; expected auto, cpu or gpu")
        deformer = self.deformer_config(method, params)
        try:  # protobuf's own TypeError/ValueError for a value of the wrong type or range
            req = pb.CreateSessionRequest(rig_id=rig_id, deformer=deformer, backend=BACKENDS[backend],
                                          encoding=ENCODINGS[encoding], max_error=max_error,
                                          key_frame_interval=key_frame_interval, latest_pose_wins=latest_pose_wins)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"create_session: {e}") from None
        if expected_joint_names:
            req.expected_joint_names.extend(expected_joint_names)
        return Session(self, self._call(self.stub.CreateSession, req, timeout))

    def session(self, session_id: str) -> "Session":
        """A :class:`Session` object for an existing session id."""
        return Session(self, self._call(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id)))

    def list_sessions(self) -> List["Session"]:
        """This tenant's open sessions."""
        return [Session(self, s) for s in self._call(self.stub.ListSessions, pb.ListSessionsRequest()).sessions]


def connect(target: str, **options: Any) -> Client:
    """A :class:`Client` for `target` (``HOST:PORT``); see :class:`Client` for the options."""
    return Client(target, **options)


def _pose_proto(pose: PoseLike) -> Any:
    if isinstance(pose, Pose):
        return pose.to_proto()
    if isinstance(pose, pb.Pose):
        return pose
    raise InvalidArgument(f"pose: {type(pose).__name__}; expected sinew.Pose or sinew.v1.Pose")


class Session:
    """A session on a rig: a deformer configuration, a backend and an output encoding. Use it as a
    context manager to close it at the end of a block."""

    def __init__(self, client: Client, info: Any) -> None:
        self.client = client
        self.info = info  # sinew.v1.Session as last read
        self.id: str = info.session_id
        self.rig_id: str = info.rig_id
        self.vertex_count: int = info.vertex_count
        self.joint_count: int = info.joint_count
        # Frame numbers continue after the session's last applied frame, so that a Session made
        # for an existing stateful session (Client.session, list_sessions) sends frames it accepts.
        self._next_frame = info.last_frame + 1 if info.HasField("last_frame") else 0
        self._numbering = threading.Lock()  # a stream's requests are made on gRPC's thread
        self._closed_with_stream = False  # a stream sent close_with_stream: the server closes it
        # Writers of the session's frames (under _numbering): this object's streams whose call is
        # open, and unary frames sent and not yet answered. A stateful session's history takes one
        # writer at a time (see stream).
        self._writers = threading.Condition(self._numbering)
        self._streams_open = 0
        self._unary_in_flight = 0

    def __repr__(self) -> str:
        return (f"Session({self.id!r}, rig={self.rig_id[:12]}, method={self.method}, backend={self.backend}, "
                f"encoding={self.encoding}, vertices={self.vertex_count})")

    @property
    def method(self) -> str:
        d = self.info.deformer
        return "+".join(method_name(s.method) for s in d.stages) if len(d.stages) else method_name(d.method)

    @property
    def backend(self) -> str:
        return pb.Backend.Name(self.info.backend)[len("BACKEND_"):].lower()

    @property
    def encoding(self) -> str:
        return pb.OutputEncoding.Name(self.info.encoding)[len("OUTPUT_ENCODING_"):].lower()

    def _stateful(self) -> bool:
        """Whether the session's frames depend on its earlier frames (elastic-implicit, supercages,
        pbs with jiggle, swing-twist's unwrap_twist, a pipeline with such a stage): the server
        applies them strictly in increasing order of their numbers. From the server's catalogue
        (``MethodInfo.stateful``, asked for once per client) and the parameters that make a method
        stateful; without the catalogue (the server out of reach) from the methods this client
        knows."""
        info = self.client._info
        if info is None:
            try:
                info = self.client.server_info()
            except SinewError:
                info = None
        config = self.info.deformer
        for stage in (list(config.stages) or [config]):
            m = info.find_method(stage.method) if info is not None else None
            if m.stateful if m is not None else stage.method in _STATEFUL_METHODS:
                return True
            field, flag = _STATEFUL_WITH.get(stage.method, ("", ""))
            if field and stage.HasField(field) and getattr(getattr(stage, field), flag):
                return True
        return False

    def _one_writer(self, what: str) -> FailedPrecondition:
        return FailedPrecondition(
            f"{what}: session {self.id} ({self.method}) is stateful and one of its streams is open: its frames are "
            "applied strictly in increasing order of their numbers, and a frame numbered here could reach the server "
            "before the stream's earlier frames, which would then be refused; send it on that stream, or after the "
            "stream ends")

    def _begin_unary(self) -> None:
        """A unary frame is about to take its number: refused at once, before any call, while one
        of a stateful session's streams is open (see :meth:`stream`)."""
        with self._writers:
            if not self._streams_open:
                self._unary_in_flight += 1
                return
        stateful = self._stateful()  # may ask the server for its catalogue: not under the lock
        with self._writers:
            if self._streams_open and stateful:
                raise self._one_writer("deform")
            self._unary_in_flight += 1

    def _end_unary(self) -> None:
        with self._writers:
            self._unary_in_flight -= 1
            self._writers.notify_all()

    def _begin_stream(self) -> None:
        """A stream's call is about to open. On a stateful session a second stream is refused, and
        unary frames still in flight are waited for (their numbers, taken before the stream's,
        must reach the server first)."""
        stateful: Optional[bool] = None
        while True:
            with self._writers:
                if stateful is False or not (self._streams_open or self._unary_in_flight):
                    self._streams_open += 1
                    return
                if stateful:
                    if self._streams_open:
                        raise self._one_writer("stream")
                    self._writers.wait()
                    continue
            stateful = self._stateful()  # not under the lock

    def _end_stream(self) -> None:
        with self._writers:
            self._streams_open -= 1
            self._writers.notify_all()

    def refresh(self) -> Any:
        """Reads the session again (``sinew.v1.Session``: frames so far, last use, ...)."""
        self.info = self.client._call(self.client.stub.GetSession, pb.GetSessionRequest(session_id=self.id))
        return self.info

    def wait_prepared(self, timeout: Optional[float] = None,
                      progress: Optional[Callable[[float, str], None]] = None, poll: float = 0.05) -> Any:
        """Waits for this session's own per-rig preparations (``Session.preparations``), as
        :meth:`Client.wait_prepared` does for `keys`: a failed preparation of other parameters on
        the same rig does not fail it, its own does."""
        return self.client.wait_prepared(self.rig_id, timeout=timeout, progress=progress, poll=poll,
                                         keys=list(self.info.preparations))

    def close(self) -> int:
        """Closes the session; returns the frames it deformed. After a stream with
        `close_with_stream` the server has closed it: :class:`~sinew.errors.NotFound` (which
        ``with session:`` ignores then). At most :data:`CLOSE_TIMEOUT` (10 s) or the client's
        `timeout` where shorter, as the C++ client's ``CloseSession``: a close runs on every way
        out of a ``with`` block, and a server that stopped answering (alive to keepalive pings)
        must not hold it (until 2026-12-07 a client without a timeout waited forever);
        :class:`~sinew.errors.DeadlineExceeded` past it."""
        timeout = CLOSE_TIMEOUT if not self.client.timeout else min(self.client.timeout, CLOSE_TIMEOUT)
        return int(self.client._call(self.client.stub.CloseSession, pb.CloseSessionRequest(session_id=self.id),
                                     timeout).frames)

    def update(self, params: Optional[Mapping[Any, Any]] = None) -> "Session":
        """New parameters for the session's method from its next frame on, keeping its state
        (``UpdateSession``), by the names of :meth:`Client.deformer_config` (unset ones: the
        method's defaults). Parameters its per-rig preparation depends on cannot change
        (:class:`~sinew.errors.FailedPrecondition` names the preparation); methods whose
        parameters are fixed at creation (all but pbs today) and pipelines give
        :class:`~sinew.errors.Unimplemented`."""
        config = self.client.deformer_config(self.method, params)
        self.info = self.client._call(self.client.stub.UpdateSession,
                                      pb.UpdateSessionRequest(session_id=self.id, deformer=config))
        return self

    def get_state(self) -> Any:
        """A snapshot of the session's state (``GetSessionState``): a ``sinew.v1.SessionState``
        (``.SerializeToString()`` to keep it) that :meth:`set_state` restores into a session of the
        same rig and deformer, here or on another server, which then continues bit for bit on the
        same kind of backend. Stateless sessions carry only their last frame number;
        :class:`~sinew.errors.Unavailable` while a session serves its method's fallback."""
        return self.client._call(self.client.stub.GetSessionState, pb.GetSessionStateRequest(session_id=self.id))

    def set_state(self, state: Any) -> "Session":
        """Restores a :meth:`get_state` snapshot (the message or its serialized bytes) into this
        session; its frames then continue after the snapshot's last frame. Refused while one of a
        stateful session's streams is open: the stream's frames would go on from the snapshot's
        history with their own numbers (see :meth:`stream`)."""
        with self._writers:
            streaming = self._streams_open > 0
        if streaming and self._stateful():
            raise self._one_writer("set_state")
        if isinstance(state, (bytes, bytearray, memoryview)):
            msg = pb.SessionState()
            try:
                msg.ParseFromString(bytes(state))
            except Exception as e:  # protobuf's DecodeError
                raise InvalidArgument(f"state: not a serialized sinew.v1.SessionState ({e})") from e
            state = msg
        info = self.client._call(self.client.stub.SetSessionState,
                                 pb.SetSessionStateRequest(session_id=self.id, state=state))
        self.info = info
        with self._numbering:
            self._next_frame = info.last_frame + 1 if info.HasField("last_frame") else 0
        return self

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except NotFound:
            # A stream with close_with_stream closed it when it ended (until 2026-12-03 the
            # `with` block raised NotFound after such a stream).
            if exc[0] is None and not self._closed_with_stream:
                raise
        except SinewError:
            if exc[0] is None:
                raise

    # -- frames -----------------------------------------------------------------------------------

    def frame_bytes(self, frames: int = 1) -> int:
        """Bytes of a shared-memory region that holds `frames` of this session's frames side by
        side (each slot a multiple of 4 bytes, delta frames at their largest):
        ``client.shared_memory(session.frame_bytes(window))`` for ``stream(window=window)``."""
        return frames * frame_bytes(self.vertex_count, self.info.encoding)

    def request(self, pose: "Optional[PoseLike | FrameInput]" = None, *, cages: Sequence[CagePose] = (),
                posed_cage: Optional[CagePose] = None, outputs: Optional[Mapping[str, Any]] = None,
                shared_memory: Optional[SharedMemoryRegion] = None, offset: int = 0, frame: Optional[int] = None,
                reset: bool = False, key_frame: bool = False, time_step: float = 0.0) -> Any:
        """The ``sinew.v1.DeformRequest`` of a frame (numbered after the last one unless `frame`):
        a `pose`, posed `cages` and a `posed_cage` edit (cage methods), `outputs` besides the
        positions (names of ``sinew.v1.FrameOutputs``, see :class:`~sinew.FrameInput`), a
        `shared_memory` region to write the positions into at `offset`, `reset`, `key_frame`,
        `time_step`. `pose` may be a :class:`~sinew.FrameInput` holding all but the region and
        the number."""
        if isinstance(pose, FrameInput):
            if cages or posed_cage is not None or outputs is not None or reset or key_frame or time_step:
                raise InvalidArgument("request: give a FrameInput or the frame's inputs as arguments, not both")
            fi = pose
            pose, cages, posed_cage, outputs = fi.pose, fi.cages, fi.posed_cage, fi.outputs
            reset, key_frame, time_step = fi.reset, fi.key_frame, fi.time_step
        try:  # protobuf's own TypeError/ValueError for a value of the wrong type
            req = pb.DeformRequest(session_id=self.id, reset=reset, key_frame=key_frame, time_step=time_step)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"request: {e}") from None
        if pose is not None:
            req.pose.CopyFrom(_pose_proto(pose))
        for i, c in enumerate(cages):
            if not isinstance(c, CagePose):
                raise InvalidArgument(f"cages[{i}]: {type(c).__name__}; expected sinew.CagePose")
            c.to_proto(req.cages.add())
        if posed_cage is not None:
            if not isinstance(posed_cage, CagePose):
                raise InvalidArgument(f"posed_cage: {type(posed_cage).__name__}; expected sinew.CagePose")
            posed_cage.to_proto(req.posed_cage)
        if outputs:
            if "shared_memory" in outputs:
                raise InvalidArgument("outputs.shared_memory: give the region as shared_memory=")
            _set_fields(req.outputs, outputs, "outputs")
        if shared_memory is not None:
            if offset < 0 or offset % 4:
                raise InvalidArgument(f"offset: {offset}; expected a multiple of 4 >= 0")
            t = req.outputs.shared_memory
            t.region_id, t.offset = shared_memory.region_id, offset
        if frame is not None and (isinstance(frame, bool) or not isinstance(frame, numbers.Integral)
                                  or not 0 <= frame < 2**64):
            raise InvalidArgument(f"frame: {frame!r}; expected an integer from 0 to 2**64 - 1")
        with self._numbering:  # last: a request that cannot be made takes no number
            if frame is None:
                frame = self._next_frame
            self._next_frame = int(frame) + 1
        req.frame = int(frame)
        return req

    def _frame(self, resp: Any, decoder: PositionDecoder, shared_memory: Optional[SharedMemoryRegion] = None) -> Frame:
        positions = None
        error = None
        if resp.HasField("error"):
            error = error_for(resp.error.code, resp.error.message, resp.frame)
        elif not resp.skipped:
            try:
                positions = decoder.decode(resp, shared_memory)
            except SinewError as e:  # this client's decode (DataLoss, a delta frame out of step): the frame's error
                error = e
                error.frame = resp.frame
        # Pipelines' frames carry METHOD_UNSPECIFIED: they are the pipeline's ("dqs+implicit").
        method = method_name(resp.method) if resp.method != pb.METHOD_UNSPECIFIED else self.method
        return Frame(resp.frame, positions, method, resp.compute_ns, resp.skipped, error, resp)

    def deform_frame(self, pose: "Optional[PoseLike | FrameInput]" = None, **kwargs: Any) -> Frame:
        """One frame (unary ``Deform``) as a :class:`Frame` (positions, and what `outputs` asked
        for: ``Frame.joints``, ``posed_cage``, ``normals``, ...); arguments as :meth:`request`.
        With `shared_memory`, the positions come through the region and are copied out. While one of
        a stateful session's streams is open: :class:`~sinew.errors.FailedPrecondition`, raised
        here before any call (see :meth:`stream`)."""
        self._begin_unary()
        try:
            req = self.request(pose, **kwargs)
            try:
                resp = self.client._call(self.client.stub.Deform, req)
            except SinewError as e:
                # A unary frame's refusal is a status, not DeformResponse.error: named by its number
                # as a stream's frame is (until 2026-12-04 its `frame` was None).
                if e.frame is None:
                    e.frame = req.frame
                raise
        finally:
            self._end_unary()
        frame = self._frame(resp, PositionDecoder(), kwargs.get("shared_memory"))
        if frame.error is not None:
            raise frame.error
        return frame

    def deform(self, pose: "Optional[PoseLike | FrameInput]" = None, **kwargs: Any) -> np.ndarray:
        """Deforms one frame (a pose, or a :class:`~sinew.FrameInput`, or the inputs as keyword
        arguments of :meth:`request`); returns the positions, (vertex_count, 3) float32."""
        frame = self.deform_frame(pose, **kwargs)
        if frame.positions is None:  # unary frames are never skipped; a server bug otherwise
            raise DataLoss(f"frame {frame.frame}: the response carries no positions", frame=frame.frame)
        return frame.positions

    def stream(self, poses: Iterable[FrameLike], *, window: int = 2, first_frame: Optional[int] = None,
               raise_errors: bool = True, close_with_stream: bool = False,
               outputs: Optional[Mapping[str, Any]] = None,
               shared_memory: Optional[SharedMemoryRegion] = None,
               frame_timeout: Optional[float] = None) -> Iterator[Frame]:
        """Deforms frames over one ``StreamDeform`` stream and yields a :class:`Frame` per frame, in
        order. Each item of `poses` is a :class:`~sinew.Pose`, a :class:`~sinew.FrameInput`
        (cages, per-frame outputs, reset, ...) or a ``sinew.v1.DeformRequest`` sent as it is
        (copied; its number is its own). `outputs` are asked for on every frame. With a
        `shared_memory` region of at least ``frame_bytes(window)`` bytes, frame k's positions come
        through slot k mod `window` of it (a slot is reused only after its frame was decoded). Up to `window` frames are in flight (the server reads one ahead while it deforms
        another, so 2 keeps it busy); poses are read from `poses` only as frames come back, so a
        generator may produce them live (on gRPC's thread: it must not block for long, and what
        it raises ends the stream and is raised here after the frames already sent). A frame that
        fails does not end the server's stream: with ``raise_errors=False`` it is yielded with
        its :class:`~sinew.errors.SinewError` in ``Frame.error`` and the frames after it follow;
        with `raise_errors` (the default) that error is raised when it is reached, which, as for
        any generator, ends this iteration and cancels the stream. A frame this client cannot
        decode (DataLoss, or a DELTA frame out of step with the decoder) is such a frame too; the
        DELTA frames after it fail until a key frame: yield a ``FrameInput(..., key_frame=True)``.
        Breaking out of a ``for`` loop over the call cancels the stream; an iterator kept in a
        variable stays open (its stream, and a stateful session's one writer) until it is closed
        (``it.close()``) or collected. When the server goes away mid-stream the frames it answered
        are yielded, then :class:`~sinew.errors.Unavailable` is raised. Arguments are
        checked here, before the stream starts. `close_with_stream`: the server closes the
        session when the stream ends, however it ends. `first_frame`: the number of the first
        frame sent (its default: the one after the session's last), set on the session when
        this is called, before the iterator starts. `frame_timeout` (seconds; None or 0: none):
        while a frame is in flight, the longest wait for the next answer (counted from the later
        of its request and the moment the caller asked for the next frame); past it the stream is cancelled and
        :class:`~sinew.errors.DeadlineExceeded` raised after the frames answered (a server that
        stops answering, alive to keepalives, no longer blocks the reader forever). Time spent in
        `poses` with no frame in flight, and the caller's time with each frame, do not count.

        The iterator belongs to one consumer thread (like any generator). Other threads may use
        the session meanwhile (frame numbers are taken under a lock), with one exception: a
        stateful (history-dependent) session — elastic-implicit, supercages, pbs with jiggle,
        swing-twist with unwrap_twist, a pipeline with such a stage — applies frames strictly in
        increasing order of their numbers, so its history takes one writer at a time. While its
        stream's call is open (from the first frame asked for until the iteration ends, breaks or
        is closed) a unary :meth:`deform` / :meth:`deform_frame` of the session, here or through
        a :class:`~sinew.RecoveringSession`, and a second stream, raise
        :class:`~sinew.errors.FailedPrecondition` at once, before any call: a number taken
        meanwhile could reach the server before the stream's earlier frames, which the server
        would then refuse (until 2026-12-07 they were sent, and the stream's frames failed). The
        stream waits for the session's unary frames already in flight before it opens. Stateless
        sessions take unary frames and streams side by side."""
        if window < 1:
            raise InvalidArgument(f"window: {window}; expected >= 1")
        if frame_timeout is not None and not (frame_timeout >= 0 and frame_timeout != float("inf")):
            raise InvalidArgument(f"frame_timeout: {frame_timeout}; expected seconds >= 0 (0 or None: none)")
        slot = self.frame_bytes(1)
        if shared_memory is not None and shared_memory.size < window * slot:
            raise InvalidArgument(f"shared_memory: {shared_memory.size} bytes; {window} frames in flight need "
                                  f"{window * slot} (session.frame_bytes({window}))")
        if outputs:  # checked now, not on gRPC's thread
            if "shared_memory" in outputs:
                raise InvalidArgument("outputs.shared_memory: give the region as shared_memory=")
            _set_fields(pb.FrameOutputs(), outputs, "outputs")
        try:  # here: on gRPC's thread the TypeError became grpcio's "Exception iterating requests!"
            it = iter(poses)
        except TypeError:
            raise InvalidArgument(f"poses: {type(poses).__name__} is not iterable; give a sequence or generator "
                                  "of poses (a single pose: [pose])") from None
        if first_frame is not None:
            if first_frame < 0:
                raise InvalidArgument(f"first_frame: {first_frame}; expected >= 0")
            with self._numbering:
                self._next_frame = first_frame
        return self._stream(it, window, raise_errors, close_with_stream, outputs, shared_memory, slot,
                            frame_timeout or None)

    def _stream(self, it: Iterator[FrameLike], window: int, raise_errors: bool, close_with_stream: bool,
                outputs: Optional[Mapping[str, Any]], shared_memory: Optional[SharedMemoryRegion],
                slot: int, frame_timeout: Optional[float]) -> Iterator[Frame]:
        slots = threading.Semaphore(window)
        stop = threading.Event()
        failure: "queue.Queue[BaseException]" = queue.Queue()
        expected: "queue.Queue[int]" = queue.Queue()  # frames sent and not yet answered, in order
        # For frame_timeout: when each unanswered frame was handed to gRPC, and the last answer.
        sent_at: "collections.deque[float]" = collections.deque()
        clock = threading.Lock()
        last_answer = [time.monotonic()]
        consuming = [False]  # the caller has a frame (the generator is paused at its yield)
        timed_out: List[int] = []  # the frame not answered in time, once the watchdog fired

        def requests() -> Iterator[Any]:
            sent = 0
            while True:
                slots.acquire()
                if stop.is_set():
                    return
                try:
                    pose = next(it)
                    if isinstance(pose, pb.DeformRequest):
                        req = pb.DeformRequest()
                        req.CopyFrom(pose)  # the caller's message stays as it was
                        req.session_id = req.session_id or self.id
                    else:
                        req = self.request(pose)
                    if outputs:
                        _set_fields(req.outputs, outputs, "outputs")
                    if shared_memory is not None:
                        target = req.outputs.shared_memory
                        target.region_id, target.offset = shared_memory.region_id, (sent % window) * slot
                    if close_with_stream:
                        req.close_with_stream = True
                        self._closed_with_stream = True
                    sent += 1
                except StopIteration:
                    return
                except BaseException as e:  # a bad pose: ends the stream, raised to the reader
                    failure.put(e)
                    return
                with clock:
                    expected.put(req.frame)
                    sent_at.append(time.monotonic())
                yield req

        self.client._check_open()
        self._begin_stream()  # a stateful session's one writer (see stream)
        try:
            self.client._first_connection()
            call = self.client.stub.StreamDeform(requests(), metadata=self.client._metadata)
        except BaseException:
            self._end_stream()
            raise

        def watchdog() -> None:  # cancels the call when a frame in flight waits past frame_timeout
            assert frame_timeout is not None
            while not stop.wait(min(frame_timeout / 4, 0.25)):
                with clock:
                    if consuming[0]:  # the caller's time is not the server's
                        continue
                    if sent_at and time.monotonic() - max(sent_at[0], last_answer[0]) > frame_timeout:
                        timed_out.append(expected.queue[0])
                        call.cancel()
                        return

        try:
            # Inside the try: a watchdog or decoder that cannot start still ends the call and the
            # session's one writer (until 2026-12-07 it left the writer counted, and every later
            # unary frame of a stateful session refused).
            if frame_timeout is not None:
                threading.Thread(target=watchdog, name="sinew-stream-watchdog", daemon=True).start()
            decoder = PositionDecoder()
            for resp in call:
                with clock:
                    try:
                        want = expected.get_nowait()  # put before its request was handed to gRPC
                    except queue.Empty:
                        raise DataLoss(f"stream: frame {resp.frame} answered, but no frame was due") from None
                    sent_at.popleft()
                    last_answer[0] = time.monotonic()
                if resp.frame != want:
                    raise DataLoss(f"stream: frame {resp.frame} answered where frame {want} was due")
                frame = self._frame(resp, decoder, shared_memory)
                slots.release()  # after decoding: the next request may reuse what this frame used
                if frame.error is not None and raise_errors:
                    raise frame.error
                with clock:
                    consuming[0] = True
                yield frame
                with clock:  # asked for the next: the wait starts now
                    consuming[0] = False
                    last_answer[0] = time.monotonic()
        except grpc.RpcError as e:
            if timed_out:
                raise DeadlineExceeded(f"stream: no answer to frame {timed_out[0]} within frame_timeout "
                                       f"{frame_timeout:g} s; the stream was cancelled", frame=timed_out[0]) from None
            if not failure.empty():
                raise failure.get() from None
            raise self.client._error(e) from None
        finally:
            stop.set()
            for _ in range(window + 1):
                slots.release()  # wakes a request generator waiting for a slot
            call.cancel()
            self._end_stream()
        if timed_out:  # cancelled between answers: the stream ended without an error
            raise DeadlineExceeded(f"stream: no answer to frame {timed_out[0]} within frame_timeout "
                                   f"{frame_timeout:g} s; the stream was cancelled", frame=timed_out[0])
        if not failure.empty():
            raise failure.get()
        if not expected.empty():
            raise DataLoss(f"stream: the server ended the stream without answering frame {expected.get()} "
                           f"and {expected.qsize()} more")

    # -- batches ----------------------------------------------------------------------------------

    def iter_clip(self, clip: Optional[Clip] = None, fps: float = 30.0, *, poses: Optional[Sequence[PoseLike]] = None,
                  first_frame: int = 0, max_frames: int = 0, time_step: float = 0.0,
                  progress: Optional[ProgressFn] = None) -> Iterator[ClipFrame]:
        """A batch (``DeformClip``) on the server: a `clip` sampled at `fps` (frame i at i / fps;
        floor(duration * fps) + 1 frames), or a list of `poses`. Yields every frame in order;
        `progress(done, total)` after each (`done` counts from the clip's start, so a resumed
        batch starts at `first_frame` + 1). `first_frame` resumes an interrupted batch,
        `max_frames` (0: all) splits one. Arguments are checked here, before the batch starts;
        breaking out of the loop cancels it."""
        return self._iter_clip(self._clip_request(clip, fps, poses=poses, first_frame=first_frame,
                                                  max_frames=max_frames, time_step=time_step), progress)

    def _clip_request(self, clip: Optional[Clip] = None, fps: float = 30.0, *,
                      poses: Optional[Sequence[PoseLike]] = None, first_frame: int = 0, max_frames: int = 0,
                      time_step: float = 0.0) -> Any:
        """iter_clip's ``DeformClipRequest``, its arguments checked."""
        if (clip is None) == (poses is None):
            raise InvalidArgument("deform_clip: give a clip or poses")
        if first_frame < 0 or max_frames < 0:
            raise InvalidArgument(f"first_frame, max_frames: {first_frame}, {max_frames}; expected >= 0")
        # A resumed batch on a history-dependent method replays the frames before first_frame
        # first, sending nothing unless asked: a progress message every 10 s keeps proxies with
        # idle timeouts (Envoy's stream_idle_timeout, HAProxy's timeouts) from cutting a long replay (until 2026-12-07
        # not asked for; _iter_clip skips these messages).
        req = pb.DeformClipRequest(session_id=self.id, first_frame=first_frame, max_frames=max_frames,
                                   time_step=time_step, replay_progress_ms=10000 if first_frame > 0 else 0)
        if clip is not None:
            req.clip.clip.CopyFrom(clip.to_proto())
            req.clip.frames_per_second = fps
        else:
            req.poses.SetInParent()  # an empty list too (until 2026-12-07: "source: give a clip ... or poses")
            for p in poses or []:
                req.poses.poses.add().CopyFrom(_pose_proto(p))
        return req

    def _iter_clip(self, req: Any, progress: Optional[ProgressFn]) -> Iterator[ClipFrame]:
        decoder = PositionDecoder()
        self.client._check_open()
        self.client._first_connection()
        call = self.client.stub.DeformClip(req, metadata=self.client._metadata)
        try:
            for resp in call:
                if resp.replayed > 0:  # a replay progress message: no frame
                    continue
                method = method_name(resp.method) if resp.method != pb.METHOD_UNSPECIFIED else self.method
                frame = ClipFrame(resp.frame, resp.total_frames, resp.time_seconds, decoder.decode(resp), method)
                if progress:
                    progress(resp.frame + 1, resp.total_frames)
                yield frame
        except grpc.RpcError as e:
            raise self.client._error(e) from None
        finally:
            call.cancel()

    def deform_clip(self, clip: Clip, fps: float = 30.0, *, progress: Optional[ProgressFn] = None,
                    **kwargs: Any) -> np.ndarray:
        """Every frame of a clip batch as one (frames, vertex_count, 3) float32 array; keyword
        arguments as :meth:`iter_clip` (`progress`, `first_frame`, `max_frames`)."""
        return self._collect(self._clip_request(clip, fps, **kwargs), progress)

    def deform_batch(self, poses: Sequence[PoseLike], *, progress: Optional[ProgressFn] = None,
                     **kwargs: Any) -> np.ndarray:
        """A list of poses as one batch; (len(poses), vertex_count, 3) float32."""
        return self._collect(self._clip_request(poses=poses, **kwargs), progress)

    def _collect(self, req: Any, progress: Optional[ProgressFn]) -> np.ndarray:
        """A batch's frames as one array, allocated once, when the first frame says how long the
        clip is (the request says where the batch starts and how many frames it asks for), and
        filled row by row (one frame's positions alive beside it at a time): until 2026-12-07 the
        frames were kept in a list and stacked, two whole copies of the result at the peak (a
        4.6 MB result peaked at 9.4 MB). A batch the server ends early, or whose frames come out
        of order, is DataLoss, not an array with rows never written."""
        first, limit = int(req.first_frame), int(req.max_frames)
        out: Optional[np.ndarray] = None
        done = 0
        frames = self._iter_clip(req, progress)
        try:
            for f in frames:
                if out is None:
                    count = max(f.total_frames - first, 0)
                    out = np.empty((min(count, limit) if limit else count,) + f.positions.shape, np.float32)
                if f.frame != first + done or done >= len(out) or f.positions.shape != out.shape[1:]:
                    raise DataLoss(f"batch: frame {f.frame} ({f.positions.shape[0]} vertices) answered where frame "
                                   f"{first + done} ({out.shape[1]} vertices) of {first} to {first + len(out) - 1} "
                                   "was due", frame=f.frame)
                out[done] = f.positions
                done += 1
        finally:
            frames.close()  # cancels the call when this stopped early
        if out is None:
            return np.zeros((0, self.vertex_count, 3), np.float32)
        if done != len(out):
            raise DataLoss(f"batch: the server ended it after {done} of frames {first} to {first + len(out) - 1}")
        return out
