"""What a server offers (``GetServerInfo``) as typed objects: its methods with their parameters,
inputs and backends, its backends, encodings and limits.

Names follow the rest of the client: methods by their command-line names (``"cage-mvc"``),
backends ``"cpu"``/``"gpu"``, encodings ``"float32"``, ``"float16"``, ``"quantized16"``,
``"delta"``. ``ServerInfo.proto`` keeps the ``sinew.v1.ServerInfo`` message for anything newer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._proto import pb
from .errors import NotFound

__all__ = ["ParamInfo", "MethodInfo", "BackendInfo", "Limits", "DeviceInfo", "ServerInfo"]


def _backend_name(value: int) -> str:
    return pb.Backend.Name(value)[len("BACKEND_"):].lower() if value in pb.Backend.values() else "?"


def _encoding_name(value: int) -> str:
    if value not in pb.OutputEncoding.values():
        return "?"
    return pb.OutputEncoding.Name(value)[len("OUTPUT_ENCODING_"):].lower()


@dataclass
class ParamInfo:
    """One parameter of a method, a field of its parameters message (``Session`` parameters are
    given by these names): its type (``"number"``, ``"integer"``, ``"flag"``, ``"choice"`` or
    ``"list"``), default as text (empty: none, e.g. "the rig's attribute"), description, the
    accepted words of a choice, and the fields of each item of a list."""

    name: str
    type: str
    default: str
    description: str
    choices: List[str] = field(default_factory=list)
    items: List["ParamInfo"] = field(default_factory=list)

    @classmethod
    def from_proto(cls, p: Any) -> "ParamInfo":
        return cls(p.name, p.type, p.default_value, p.description, list(p.choices),
                   [cls.from_proto(i) for i in p.items])


@dataclass
class MethodInfo:
    """A deformation method: `name` (``"elastic-implicit"``), its ``sinew.v1.Method`` value,
    what it does, the backends that run it, whether sessions keep state between frames, its
    parameters (by name, in the server's order) and the ``DeformerConfig`` field that holds them,
    what its frames read (``"pose"``, ``"cages"``, ``"posed_cage"``), whether it reports vertex
    states, what it does in a pipeline (``"first"``, ``"rest"``, ``"posed"``) and the method
    served while its per-rig preparation runs (empty: sessions wait for it)."""

    name: str
    method: int
    description: str
    backends: List[str]
    stateful: bool
    params_field: str
    params: Dict[str, ParamInfo]
    inputs: List[str]
    vertex_states: bool
    follows: str
    fallback: str

    @classmethod
    def from_proto(cls, m: Any) -> "MethodInfo":
        return cls(m.name, m.method, m.description, [_backend_name(b) for b in m.backends], m.stateful,
                   m.params_field, {p.name: ParamInfo.from_proto(p) for p in m.params}, list(m.inputs),
                   m.vertex_states, m.follows, m.fallback)


@dataclass
class BackendInfo:
    name: str  # "cpu", "gpu"
    available: bool
    description: str


@dataclass
class Limits:
    """The server's limits (0: none where the proto says so)."""

    max_vertices_per_rig: int
    max_rig_bytes: int
    max_sessions: int
    session_idle_ttl_seconds: int
    worker_threads: int
    max_joints: int
    max_message_bytes: int

    @classmethod
    def from_proto(cls, lim: Any) -> "Limits":
        return cls(lim.max_vertices_per_rig, lim.max_rig_bytes, lim.max_sessions, lim.session_idle_ttl_seconds,
                   lim.worker_threads, lim.max_joints, lim.max_message_bytes)


@dataclass
class DeviceInfo:
    """A GPU the server uses: memory (total, what this server may use, what its rigs and sessions
    hold), the fraction of the last second it was busy, its rigs and sessions, and the frames
    submitted to it: waiting for a batch (queued) and in one (running)."""

    index: int
    name: str
    total_bytes: int
    limit_bytes: int
    used_bytes: int
    utilisation: float
    rigs: int
    sessions: int
    queued_frames: int = 0
    running_frames: int = 0

    @classmethod
    def from_proto(cls, d: Any) -> "DeviceInfo":
        return cls(d.index, d.name, d.total_bytes, d.limit_bytes, d.used_bytes, d.utilisation, d.rigs, d.sessions,
                   d.queued_frames, d.running_frames)


@dataclass
class ServerInfo:
    """A server's version, methods (by name, in the server's order), backends, encodings, limits
    and load (open sessions, resident rigs, GPUs)."""

    version: str
    api_version: str
    rpcs: List[str]
    methods: Dict[str, MethodInfo]
    backends: Dict[str, BackendInfo]
    encodings: List[str]
    limits: Limits
    sessions: int
    rigs: int
    devices: List[DeviceInfo]
    proto: Any = field(repr=False, default=None)  # the sinew.v1.ServerInfo message

    @classmethod
    def from_proto(cls, info: Any) -> "ServerInfo":
        return cls(info.version, info.api_version, list(info.rpcs),
                   {m.name: MethodInfo.from_proto(m) for m in info.methods},
                   {_backend_name(b.backend): BackendInfo(_backend_name(b.backend), b.available, b.description)
                    for b in info.backends},
                   [_encoding_name(e) for e in info.encodings], Limits.from_proto(info.limits), info.sessions,
                   info.rigs, [DeviceInfo.from_proto(d) for d in info.devices], info)

    def method(self, name_or_value: "str | int") -> MethodInfo:
        """A method by name (``"dqs"``) or ``sinew.v1.Method`` value; :class:`~sinew.errors.NotFound`
        naming the server's methods otherwise."""
        for m in self.methods.values():
            if m.name == name_or_value or m.method == name_or_value:
                return m
        raise NotFound(f"method: this server has no method {name_or_value!r} (it has {', '.join(self.methods)})")

    def find_method(self, name_or_value: "str | int") -> Optional[MethodInfo]:
        """The same, or None."""
        try:
            return self.method(name_or_value)
        except NotFound:
            return None
