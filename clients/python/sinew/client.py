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

import hashlib
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._proto import pb, pb_grpc
from .codec import PositionDecoder
from .errors import DataLoss, InvalidArgument, SinewError, from_rpc_error
from .pose import Clip, Pose

__all__ = ["Client", "Session", "Frame", "ClipFrame", "UploadResult", "connect", "method_name", "method_value",
           "ENCODINGS", "BACKENDS"]

ENCODINGS: Dict[str, int] = {
    "f32": pb.OUTPUT_ENCODING_FLOAT32, "float32": pb.OUTPUT_ENCODING_FLOAT32,
    "f16": pb.OUTPUT_ENCODING_FLOAT16, "float16": pb.OUTPUT_ENCODING_FLOAT16,
    "q16": pb.OUTPUT_ENCODING_QUANTIZED16, "quantized16": pb.OUTPUT_ENCODING_QUANTIZED16,
    "delta": pb.OUTPUT_ENCODING_DELTA,
}
BACKENDS: Dict[str, int] = {"auto": pb.BACKEND_AUTO, "cpu": pb.BACKEND_CPU, "gpu": pb.BACKEND_GPU}

ProgressFn = Callable[[int, int], None]
PoseLike = Union[Pose, "pb.Pose"]
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
                for item in value:
                    if f.type == f.TYPE_MESSAGE:
                        _set_fields(target.add(), item, name)
                    else:
                        target.append(convert(item))
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
    frame), the method that produced it (a method's fallback while its preparation runs), the
    server's compute time, and for streamed frames that failed, the error (raised unless the stream
    was asked to yield errors)."""

    frame: int
    positions: Optional[np.ndarray]
    method: str
    compute_ns: int
    skipped: bool = False
    error: Optional[SinewError] = None
    response: Any = None  # the sinew.v1.DeformResponse


@dataclass
class ClipFrame:
    """One frame of a batch: its index in the whole clip, the clip's frame count, its clip time
    (0 for pose lists) and positions (V, 3) float32."""

    frame: int
    total_frames: int
    time_seconds: float
    positions: np.ndarray


def _read(path: Optional[str], what: str) -> Optional[bytes]:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgument(f"{what}: cannot read {path}: {e.strerror}") from e


class Client:
    """A connection to a Sinew server (``HOST:PORT``), made lazily, with unlimited message sizes.

    Options match the C++ client's ``ClientOptions``:

    * `token`: bearer token for a server run with ``--token-file``, sent with every call (default:
      ``$SINEW_TOKEN`` when set; pass ``""`` for none);
    * `tls`: connect with TLS (implied by any of the files); `tls_ca`: PEM file of the CA that
      signed the server's certificate (default: the system's roots); `tls_cert` / `tls_key`: this
      client's certificate chain and key for mutual TLS (together); `server_name`: the name to check
      the server's certificate against (default: the target's host);
    * `affinity`: sent as ``x-sinew-affinity`` with every call so that a balancer hashing it keeps
      this client's calls on one server;
    * `timeout`: seconds for each unary call (default: none).
    """

    def __init__(self, target: str, *, token: Optional[str] = None, tls: bool = False, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None, server_name: Optional[str] = None,
                 affinity: Optional[str] = None, timeout: Optional[float] = None) -> None:
        self.target = target
        self.timeout = timeout
        if token is None:
            token = os.environ.get("SINEW_TOKEN", "")
        self._metadata: List[Tuple[str, str]] = []
        if token:
            self._metadata.append(("authorization", "Bearer " + token))
        if affinity:
            self._metadata.append(("x-sinew-affinity", affinity))
        options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", -1),
                                          ("grpc.max_send_message_length", -1)]
        if tls or tls_ca or tls_cert or tls_key:
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
        self._info: Optional[Any] = None

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def metadata(self) -> List[Tuple[str, str]]:
        """The metadata sent with every call (token, affinity)."""
        return list(self._metadata)

    def _call(self, rpc: Callable, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return rpc(request, metadata=self._metadata, timeout=timeout if timeout is not None else self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def close(self) -> None:
        """Closes the channel (calls in progress are cancelled)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until the channel is connected; :class:`~sinew.errors.Unavailable` after `timeout`."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            from .errors import Unavailable
            raise Unavailable(f"cannot connect to {self.target} within {timeout:g} s") from None

    # -- server and rigs --------------------------------------------------------------------------

    def server_info(self) -> Any:
        """``sinew.v1.ServerInfo``: version, methods (with parameters and backends), backends,
        encodings, limits."""
        self._info = self._call(self.stub.GetServerInfo, pb.GetServerInfoRequest())
        return self._info

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

        def requests() -> Iterator[Any]:
            yield pb.UploadRigRequest(header=pb.UploadHeader(total_bytes=len(data), sha256=rig_id))
            view = memoryview(data)
            for off in range(0, len(data), chunk_bytes):
                chunk = view[off:off + chunk_bytes]
                yield pb.UploadRigRequest(chunk=bytes(chunk))
                sent[0] = off + len(chunk)
                if progress:
                    progress(sent[0], len(data))

        resp = self._call(self.stub.UploadRig, requests())
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
        if self._info is None:
            self.server_info()
        for m in self._info.methods:
            if m.method == method:
                return m.params_field
        raise InvalidArgument(f"method: this server has no method {method_name(method)}")

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
        take a while the first time; `timeout` bounds it."""
        if encoding not in ENCODINGS:
            raise InvalidArgument(f"encoding: {encoding!r}; expected f32, f16, q16 or delta")
        if backend not in BACKENDS:
            raise InvalidArgument(f"backend: {backend!r}; expected auto, cpu or gpu")
        req = pb.CreateSessionRequest(rig_id=rig_id, deformer=self.deformer_config(method, params),
                                      backend=BACKENDS[backend], encoding=ENCODINGS[encoding],
                                      max_error=max_error, key_frame_interval=key_frame_interval,
                                      latest_pose_wins=latest_pose_wins)
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

    def refresh(self) -> Any:
        """Reads the session again (``sinew.v1.Session``: frames so far, last use, ...)."""
        self.info = self.client._call(self.client.stub.GetSession, pb.GetSessionRequest(session_id=self.id))
        return self.info

    def close(self) -> int:
        """Closes the session; returns the frames it deformed."""
        return int(self.client._call(self.client.stub.CloseSession, pb.CloseSessionRequest(session_id=self.id)).frames)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except SinewError:
            if exc[0] is None:
                raise

    # -- frames -----------------------------------------------------------------------------------

    def request(self, pose: Optional[PoseLike] = None, *, frame: Optional[int] = None, reset: bool = False,
                key_frame: bool = False, time_step: float = 0.0) -> Any:
        """The ``sinew.v1.DeformRequest`` for a pose (numbered after the last one unless `frame`)."""
        with self._numbering:
            if frame is None:
                frame = self._next_frame
            self._next_frame = frame + 1
        req = pb.DeformRequest(session_id=self.id, frame=frame, reset=reset, key_frame=key_frame, time_step=time_step)
        if pose is not None:
            req.pose.CopyFrom(_pose_proto(pose))
        return req

    @staticmethod
    def _frame(resp: Any, decoder: PositionDecoder) -> Frame:
        positions = None
        error = None
        if resp.HasField("error") or resp.skipped:
            if resp.HasField("error"):
                from .errors import error_for
                error = error_for(resp.error.code, resp.error.message, resp.frame)
        else:
            positions = decoder.decode(resp)
        return Frame(resp.frame, positions, method_name(resp.method), resp.compute_ns, resp.skipped, error, resp)

    def deform_frame(self, pose: Optional[PoseLike] = None, **kwargs: Any) -> Frame:
        """One frame (unary ``Deform``) as a :class:`Frame`; keyword arguments as :meth:`request`."""
        resp = self.client._call(self.client.stub.Deform, self.request(pose, **kwargs))
        frame = self._frame(resp, PositionDecoder())
        if frame.error is not None:
            raise frame.error
        return frame

    def deform(self, pose: Optional[PoseLike] = None, **kwargs: Any) -> np.ndarray:
        """Deforms one pose; returns the positions, (vertex_count, 3) float32."""
        frame = self.deform_frame(pose, **kwargs)
        if frame.positions is None:  # unary frames are never skipped; a server bug otherwise
            raise DataLoss(f"frame {frame.frame}: the response carries no positions", frame=frame.frame)
        return frame.positions

    def stream(self, poses: Iterable[PoseLike], *, window: int = 2, first_frame: Optional[int] = None,
               raise_errors: bool = True, close_with_stream: bool = False) -> Iterator[Frame]:
        """Deforms poses over one ``StreamDeform`` stream and yields a :class:`Frame` per pose, in
        order. Items may also be ``sinew.v1.DeformRequest`` s, sent as they are (copied; their
        numbers are their own). Up to `window` frames are in flight (the server reads one ahead while it deforms
        another, so 2 keeps it busy); poses are read from `poses` only as frames come back, so a
        generator may produce them live (on gRPC's thread: it must not block for long, and what
        it raises ends the stream and is raised here after the frames already sent). A frame that
        fails does not end the stream: its :class:`~sinew.errors.SinewError` is raised when it is
        reached (`raise_errors`), or yielded in ``Frame.error``. Breaking out of the loop (or
        closing the iterator) cancels the stream. When the server goes away mid-stream the frames
        it answered are yielded, then :class:`~sinew.errors.Unavailable` is raised. Arguments are
        checked here, before the stream starts. `close_with_stream`: the server closes the
        session when the stream ends, however it ends.

        The iterator belongs to one consumer thread (like any generator); other threads may use
        the session meanwhile (frame numbers are taken under a lock)."""
        if window < 1:
            raise InvalidArgument(f"window: {window}; expected >= 1")
        if first_frame is not None:
            if first_frame < 0:
                raise InvalidArgument(f"first_frame: {first_frame}; expected >= 0")
            with self._numbering:
                self._next_frame = first_frame
        return self._stream(poses, window, raise_errors, close_with_stream)

    def _stream(self, poses: Iterable[PoseLike], window: int, raise_errors: bool,
                close_with_stream: bool) -> Iterator[Frame]:
        slots = threading.Semaphore(window)
        stop = threading.Event()
        failure: "queue.Queue[BaseException]" = queue.Queue()
        expected: "queue.Queue[int]" = queue.Queue()  # frames sent and not yet answered, in order

        def requests() -> Iterator[Any]:
            it = iter(poses)
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
                    if close_with_stream:
                        req.close_with_stream = True
                except StopIteration:
                    return
                except BaseException as e:  # a bad pose: ends the stream, raised to the reader
                    failure.put(e)
                    return
                expected.put(req.frame)
                yield req

        call = self.client.stub.StreamDeform(requests(), metadata=self.client._metadata)
        decoder = PositionDecoder()
        try:
            for resp in call:
                try:
                    want = expected.get_nowait()  # put before its request was handed to gRPC
                except queue.Empty:
                    raise DataLoss(f"stream: frame {resp.frame} answered, but no frame was due") from None
                if resp.frame != want:
                    raise DataLoss(f"stream: frame {resp.frame} answered where frame {want} was due")
                frame = self._frame(resp, decoder)
                slots.release()  # after decoding: the next request may reuse what this frame used
                if frame.error is not None and raise_errors:
                    raise frame.error
                yield frame
        except grpc.RpcError as e:
            if not failure.empty():
                raise failure.get() from None
            raise from_rpc_error(e) from None
        finally:
            stop.set()
            for _ in range(window + 1):
                slots.release()  # wakes a request generator waiting for a slot
            call.cancel()
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
        if (clip is None) == (poses is None):
            raise InvalidArgument("deform_clip: give a clip or poses")
        if first_frame < 0 or max_frames < 0:
            raise InvalidArgument(f"first_frame, max_frames: {first_frame}, {max_frames}; expected >= 0")
        req = pb.DeformClipRequest(session_id=self.id, first_frame=first_frame, max_frames=max_frames,
                                   time_step=time_step)
        if clip is not None:
            req.clip.clip.CopyFrom(clip.to_proto())
            req.clip.frames_per_second = fps
        else:
            for p in poses or []:
                req.poses.poses.add().CopyFrom(_pose_proto(p))
        return self._iter_clip(req, progress)

    def _iter_clip(self, req: Any, progress: Optional[ProgressFn]) -> Iterator[ClipFrame]:
        decoder = PositionDecoder()
        call = self.client.stub.DeformClip(req, metadata=self.client._metadata)
        try:
            for resp in call:
                frame = ClipFrame(resp.frame, resp.total_frames, resp.time_seconds, decoder.decode(resp))
                if progress:
                    progress(resp.frame + 1, resp.total_frames)
                yield frame
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()

    def deform_clip(self, clip: Clip, fps: float = 30.0, **kwargs: Any) -> np.ndarray:
        """Every frame of a clip batch as one (frames, vertex_count, 3) float32 array; keyword
        arguments as :meth:`iter_clip` (`progress`, `first_frame`, `max_frames`)."""
        frames = [f.positions for f in self.iter_clip(clip, fps, **kwargs)]
        return np.stack(frames) if frames else np.zeros((0, self.vertex_count, 3), np.float32)

    def deform_batch(self, poses: Sequence[PoseLike], **kwargs: Any) -> np.ndarray:
        """A list of poses as one batch; (len(poses), vertex_count, 3) float32."""
        frames = [f.positions for f in self.iter_clip(poses=poses, **kwargs)]
        return np.stack(frames) if frames else np.zeros((0, self.vertex_count, 3), np.float32)
