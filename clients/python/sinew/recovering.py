"""A session that outlives its server, for clients behind a balancer (``deploy/haproxy.cfg``): the
Python twin of the C++ ``client::RecoveringSession`` (``clients/lib/recovering_session.h``), with
the same rules, counters and checkpoints."""
from __future__ import annotations

import copy
import random
import time
from typing import Any, List, Mapping, Optional

import grpc
import numpy as np

from ._proto import pb
from .client import Client, Frame, Session
from .codec import PositionDecoder
from .errors import DataLoss, InvalidArgument, SinewError, Unavailable

__all__ = ["RecoveringSession"]


def _message(e: SinewError) -> str:
    return e.message or ""


def _unknown(e: SinewError) -> bool:
    """The server answering does not know the session (or its rig): worth creating it again."""
    return e.code == grpc.StatusCode.NOT_FOUND and _message(e).startswith(("session_id:", "rig_id:"))


def _lost(e: SinewError) -> bool:
    """That, or no server answered: worth trying again."""
    return e.code == grpc.StatusCode.UNAVAILABLE or _unknown(e)


def _shed(e: SinewError) -> bool:
    """Answered without deforming it (admission control, ``--max-queue-ms``): send it again later."""
    return e.code == grpc.StatusCode.UNAVAILABLE and _message(e).startswith("overloaded:")


def _already_applied(e: SinewError) -> bool:
    """A stateful session's frame sent again after its answer was lost: the server had applied it."""
    m = _message(e)
    return e.code == grpc.StatusCode.FAILED_PRECONDITION and m.startswith("frame:") and "was already applied" in m


class RecoveringSession:
    """A session on `rig` (a ``sinew.v1.Rig`` or its deterministic serialization) that survives its
    server. When a frame finds no server (:class:`~sinew.errors.Unavailable`) it is sent again on
    the same session after a wait (a blip, or a server restarted with ``--state-dir``, keeps it);
    when the server answering does not know the session
    (:class:`~sinew.errors.NotFound` naming ``session_id`` or ``rig_id``: the balancer moved this
    client, or the server restarted without its state) the rig is uploaded again (one small round
    trip where it is resident), the session created again with the parameters it was last given
    (the constructor's, or :meth:`update`'s) and the frame sent again. A frame shed under load
    ("overloaded: ...") is sent again on the same session. ``frames_redone`` and
    ``sessions_recreated`` count them.

    Waits between a frame's attempts back off: `retry_delay` (50 ms) before the second, doubling
    after each up to `max_retry_delay` (2 s), each one drawn at random within ±25 % of that (so
    that a fleet of clients that lost one server does not retry in lockstep). A frame's attempts
    stop after `retry_timeout` seconds in all (30 s: a server reloading its ``--state-dir``, or a
    balancer moving clients, has that long; or `max_attempts` × `retry_delay` where that is
    longer, the total a caller who set them asked for before the backoff; None or 0: no bound of
    time) or `max_attempts` attempts (40), whichever comes first; then the last error is raised.
    (Until 2026-12-07 the wait was a fixed 100 ms, 40 attempts: about 4 s, in step across
    clients.)

    `checkpoint_every` (frames; 0: off): for history-dependent methods (elastic-implicit,
    supercages, pbs with jiggle, swing-twist unwrapping) every this many applied frames the
    session's state is fetched (``GetSessionState``) and kept with the requests applied since (at
    most twice that many while checkpoints fail). A session created again is given that state and
    those frames, in order, before the frame at hand: its history goes on bit for bit on a server
    of the backend kind the state was saved on (asked for at the re-creation when `backend` is
    ``auto``). While the new server's method still prepares the rebuild is tried again (by the
    next call too when this one runs out of attempts). A frame answered ``from_rest`` although the
    session had a history and asked for no reset (a server restarted after a crash reopens sessions
    from rest) is sent again, once per call, after the kept history is set again. Once per call, a
    frame whose answer was lost after the server applied it ("was already applied") is answered the
    same way on its own session. Frames a fallback served (the method still preparing) are no part of the history; a
    refused frame and :meth:`update` are followed by a checkpoint. A state refused by the new
    server, or nothing usable kept, starts the session from rest: ``histories_lost`` counts it.
    ``frames_replayed`` and ``checkpoints`` count the rest. Without checkpoints a re-created
    history-dependent session starts from rest, and a lost answer's "already applied" is raised.

    `create_options` go to :meth:`Client.create_session` (``backend``, ``encoding``, ...). Frames
    through shared memory are not taken (a region lives on one server). One thread at a time; a
    stateful session's frames are refused while a stream of its :attr:`session` is open (see
    :meth:`Session.stream`)."""

    def __init__(self, client: Client, rig: Any, method: str = "lbs", params: Optional[Mapping[Any, Any]] = None, *,
                 checkpoint_every: int = 0, max_attempts: int = 40, retry_delay: float = 0.05,
                 max_retry_delay: float = 2.0, retry_timeout: Optional[float] = 30.0,
                 **create_options: Any) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidArgument(f"max_attempts: {max_attempts!r}; each frame needs at least one attempt")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 0:
            raise InvalidArgument(f"checkpoint_every: {checkpoint_every!r}; 0 (off) or a number of frames")
        for name, value in (("retry_delay", retry_delay), ("max_retry_delay", max_retry_delay),
                            ("retry_timeout", 0.0 if retry_timeout is None else retry_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise InvalidArgument(f"{name}: {value!r}; expected seconds >= 0")
        if "timeout" in create_options:
            raise InvalidArgument("create_options: timeout is the client's (Client(timeout=...))")
        self.client = client
        self._rig = bytes(rig) if isinstance(rig, (bytes, bytearray)) else rig.SerializeToString(deterministic=True)
        self._method = method
        # Deep copies: what a re-created session gets does not change with the caller's objects.
        self._params = copy.deepcopy(dict(params or {}))
        self._create = copy.deepcopy(dict(create_options))
        self._checkpoint_every = checkpoint_every
        self._max_attempts = max_attempts
        self._retry_delay = float(retry_delay)
        self._max_retry_delay = float(max_retry_delay)
        self._retry_timeout = float(retry_timeout or 0.0)
        # The waits' jitter, and how they are waited and timed (a test gives its own clock).
        self._random = random.Random()
        self._sleep = time.sleep
        self._clock = time.monotonic
        self.frames_redone = 0
        self.sessions_recreated = 0
        self.frames_replayed = 0
        self.checkpoints = 0
        self.histories_lost = 0
        self._checkpoint: Optional[Any] = None  # sinew.v1.SessionState; None: as created (or reset)
        self._since: List[Any] = []  # requests applied after it
        self._history = True  # the two give the session's history
        self._stateless = False  # the last checkpoint was empty
        self._restore_pending = False  # the current session does not have the kept history yet
        self._untried = 0  # frames since the last GetSessionState
        # The current server session holds a history (a frame applied on it, or one restored): a
        # frame it answers `from_rest` without a reset means the server lost it (a crash).
        self._session_has_history = False
        self._next_frame = 0
        self.session: Session = self._open()

    # -- sessions ---------------------------------------------------------------------------------

    def _open(self) -> Session:
        rig_id = self.client.upload_rig(self._rig).rig_id
        preferred = self._create.get("backend", "auto")
        if self._checkpoint is not None and self._history and preferred == "auto":
            # A kept state continues only on the backend kind it was saved on.
            try:
                kind = pb.Backend.Name(self._checkpoint.backend)[len("BACKEND_"):].lower()
            except ValueError:  # a backend this client does not know: the server's choice
                kind = "auto"
            if kind != "auto":
                try:
                    return self.client.create_session(rig_id, self._method, self._params,
                                                      **{**self._create, "backend": kind})
                except SinewError as e:
                    if _lost(e):
                        raise
        return self.client.create_session(rig_id, self._method, self._params, **self._create)

    # Fixed at construction (as the C++ Options at Open): checkpoints turned on mid-session would
    # imply a history whose first frames were never kept.
    @property
    def checkpoint_every(self) -> int:
        return self._checkpoint_every

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    @property
    def retry_delay(self) -> float:
        return self._retry_delay

    @property
    def max_retry_delay(self) -> float:
        return self._max_retry_delay

    @property
    def retry_timeout(self) -> float:
        return self._retry_timeout

    @property
    def retry_budget(self) -> float:
        """Seconds a frame's attempts may take in all (0: no bound of time): `retry_timeout`, or
        `max_attempts` × `retry_delay` where that is longer."""
        if not self._retry_timeout:
            return 0.0
        return max(self._retry_timeout, self._max_attempts * self._retry_delay)

    def _backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (1: the second attempt): `retry_delay` doubled
        per retry before, at most `max_retry_delay`, times a random factor in [0.75, 1.25]."""
        nominal = min(self._retry_delay * 2.0 ** min(retry - 1, 64), self._max_retry_delay)
        return nominal * self._random.uniform(0.75, 1.25)

    @property
    def session_id(self) -> str:
        return self.session.id

    def update(self, params: Optional[Mapping[Any, Any]] = None) -> "RecoveringSession":
        """:meth:`Session.update` on the session (the new parameters replace the old; unset ones are
        the method's defaults), and the parameters a re-created session gets from then on. Not
        retried: its error is raised, the parameters kept as they were. A rebuild of the history
        left pending by a frame that ran out of attempts is finished first (its error raised);
        with `checkpoint_every` a checkpoint follows (the history goes on under the new
        parameters; if it fails, the history is given up until the next one)."""
        if self._restore_pending:
            self._restore()
        self.session.update(params)
        self._params = copy.deepcopy(dict(params or {}))
        if self.checkpoint_every:
            self._stateless = False  # the new parameters may make it history-dependent (pbs's jiggle)
            self._take_checkpoint(required=True)
        return self

    def close(self) -> int:
        """Closes the current session; returns the frames it deformed."""
        return self.session.close()

    def __enter__(self) -> "RecoveringSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except SinewError:
            if exc[0] is None:
                raise

    # -- history ----------------------------------------------------------------------------------

    def _start_history(self) -> None:
        self._checkpoint, self._since, self._history, self._restore_pending = None, [], True, False

    def _lose_history(self) -> None:
        self._checkpoint, self._since, self._history, self._restore_pending = None, [], False, False

    def _take_checkpoint(self, required: bool) -> None:
        self._untried = 0
        try:
            state = self.session.get_state()
        except SinewError:
            if required or len(self._since) >= 2 * self.checkpoint_every:
                self._lose_history()
            return
        self.checkpoints += 1
        self._start_history()
        self._stateless = not state.method_state
        if not self._stateless:
            self._checkpoint = state

    def _by_fallback(self, resp: Any) -> bool:
        method = self.session.info.deformer.method
        return resp.method != pb.METHOD_UNSPECIFIED and resp.method != method

    def _applied(self, req: Any, resp: Any) -> None:
        self._session_has_history = not self._by_fallback(resp)  # a fallback's frame is no history
        if not self.checkpoint_every or self._stateless:
            return
        if self._by_fallback(resp):  # the method's history starts at its first own frame
            self._start_history()
            self._untried = 0
            return
        if req.reset:
            self._start_history()
        if self._history:
            kept = pb.DeformRequest()
            kept.CopyFrom(req)
            kept.ClearField("outputs")
            kept.session_id = ""
            self._since.append(kept)
        self._untried += 1
        if self._untried >= self.checkpoint_every:
            self._take_checkpoint(required=False)

    def _restore(self) -> None:
        """Brings the current session to the kept history: the checkpoint, then the frames since."""
        if self._checkpoint is not None:
            self.session.set_state(self._checkpoint)
        for i, kept in enumerate(self._since):
            again = pb.DeformRequest()
            again.CopyFrom(kept)
            again.session_id = self.session.id
            if i == 0 and self._checkpoint is None:
                again.reset = True  # the history starts at the session's creation: from rest
            resp = self.client._call(self.client.stub.Deform, again)
            self.frames_replayed += 1
            if self._by_fallback(resp):
                raise Unavailable("the method is still preparing on this server; the history is rebuilt once it serves")
        self._restore_pending = False
        # A checkpoint of a session that had applied no frame yet (taken at an update) is no history.
        self._session_has_history = ((self._checkpoint is not None and self._checkpoint.HasField("last_frame"))
                                     or bool(self._since))

    # -- frames -----------------------------------------------------------------------------------

    def deform_frame(self, pose: Any = None, **kwargs: Any) -> Frame:
        """One frame as :meth:`Session.deform_frame` (numbered after the last one unless `frame`),
        recovered as above when needed."""
        session = self.session
        session._begin_unary()  # refused while a stream of a stateful session is open
        try:
            return self._deform_frame(pose, **kwargs)
        finally:
            session._end_unary()

    def _deform_frame(self, pose: Any = None, **kwargs: Any) -> Frame:
        if kwargs.get("shared_memory") is not None:
            raise InvalidArgument("shared_memory: a RecoveringSession's frames come in the response (a region "
                                  "lives on one server)")
        if kwargs.get("frame") is None:
            kwargs["frame"] = self._next_frame
        request = self.session.request(pose, **kwargs)
        self._next_frame = request.frame + 1
        checkpointing = self.checkpoint_every > 0
        redone = restored_lost_answer = restored_from_rest = create = False
        last: Optional[SinewError] = None
        started, final, budget = self._clock(), False, self.retry_budget
        for attempt in range(self.max_attempts):
            if attempt:
                if final:
                    break
                wait = self._backoff(attempt)
                if budget:
                    left = budget - (self._clock() - started)
                    if left <= 0:
                        break  # no attempt past the budget
                    if wait >= left:  # the last attempt, at the end of the budget
                        wait, final = left, True
                self._sleep(wait)
            if create:
                try:
                    self.session = self._open()
                except SinewError as e:
                    if _lost(e):  # the balancer has not moved us yet
                        last = e
                        continue
                    raise
                create = False
                self.sessions_recreated += 1
                self._session_has_history = False
                if checkpointing and not self._stateless:
                    if self._history:
                        self._restore_pending = True
                    else:
                        self.histories_lost += 1  # nothing kept: this frame starts a new history
                        self._start_history()
            if self._restore_pending and request.reset:
                self._start_history()  # a frame from rest needs no history
            if self._restore_pending:
                try:
                    self._restore()
                    if self._checkpoint is None and not self._since:
                        request.reset = True  # the history is this frame's, from rest
                except SinewError as e:
                    if _unknown(e):
                        create, last = True, e
                        continue
                    if _lost(e):
                        last = e
                        continue
                    self.histories_lost += 1  # refused (another backend kind): from rest
                    self._start_history()
                    request.reset = True
            request.session_id = self.session.id
            try:
                resp = self.client._call(self.client.stub.Deform, request)
            except SinewError as e:
                if e.frame is None:
                    e.frame = request.frame
                if (redone and checkpointing and self._history and not self._stateless and not restored_lost_answer
                        and _already_applied(e)):
                    restored_lost_answer, self._restore_pending, last = True, True, e
                    continue
                if not _shed(e) and not _lost(e):
                    if checkpointing and not self._stateless:
                        self._take_checkpoint(required=True)  # it may have changed the history
                    raise
                if _unknown(e):
                    create = True
                last = e
                if not redone:
                    redone = True
                    self.frames_redone += 1
                continue
            # The session had a history and the server started this frame from rest all the same:
            # it lost it (restarted without its kept state, e.g. after a crash). Set again, once.
            if (resp.from_rest and not request.reset and self._session_has_history and checkpointing
                    and self._history and not self._stateless and not restored_from_rest):
                restored_from_rest, self._restore_pending = True, True
                last = Unavailable(f"answered from rest although the session had a history (the server lost it); "
                                   f"the history is set again and the frame sent again", frame=request.frame)
                if not redone:
                    redone = True
                    self.frames_redone += 1
                continue
            self._applied(request, resp)  # applied, whether or not this client decodes it
            frame = self.session._frame(resp, PositionDecoder())
            if frame.error is not None:
                raise frame.error
            return frame
        assert last is not None
        if last.frame is None:
            last.frame = request.frame
        raise last

    def deform(self, pose: Any = None, **kwargs: Any) -> np.ndarray:
        """The positions of :meth:`deform_frame`, (vertex_count, 3) float32."""
        frame = self.deform_frame(pose, **kwargs)
        if frame.positions is None:
            raise DataLoss(f"frame {frame.frame}: the response carries no positions", frame=frame.frame)
        return frame.positions
