"""The Python client (clients/python) against a real sinew-server on a loopback port chosen at run
time. Each class starts its own server. Run by ctest (tests/CMakeLists.txt) with PYTHONPATH set to
the package, its generated stubs and this folder, SINEW_SERVER to the server and
SINEW_DECODE_FRAMES to the C++ decoder (tests/clients/decode_frames.cc)."""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import tempfile
import threading
import unittest

import grpc
import numpy as np

import sinew
from sinew_testing import Limb, Server, quat_axis_angle

# Every comparison with the float64 numpy reference: float32 rounding of positions about 3 units
# from the origin through a few matrix products stays far below this.
LBS_TOLERANCE = 1e-5



def record_deadlines(client) -> dict:
    """Routes the client's calls through a recorder of each call's deadline (rpc name -> timeout
    handed to grpcio); the calls go on to the server."""
    deadlines = {}
    real = client.stub

    class Recording:
        def __getattr__(self, name):
            rpc = getattr(real, name)

            def call(request, metadata=None, timeout=None):
                deadlines[name] = timeout
                return rpc(request, metadata=metadata, timeout=timeout)
            return call

    client.stub = Recording()
    return deadlines

def limb_rig(limb: Limb, weights: "sinew.SkinWeights | None" = None, **kwargs):
    skeleton = sinew.Skeleton(limb.names, limb.parents, limb.rest_rotations, limb.rest_translations)
    return sinew.build_rig(limb.positions, skeleton, weights or sinew.SkinWeights.dense(limb.dense_weights),
                           limb.triangles, name="limb", **kwargs)


def poses(limb: Limb, count: int):
    """`count` distinct poses: the elbow bends to 120 degrees, the wrist twists, the shoulder swings."""
    for i in range(count):
        t = i / max(count - 1, 1)
        yield limb.pose(np.radians(120 * t), np.radians(180 * t), np.radians(20 * np.sin(7 * t)))


class ServerTest(unittest.TestCase):
    server_args: tuple = ()

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(cls.server_args)
        # Stopped even when a subclass's setUpClass fails after this (unittest then skips
        # tearDownClass; the server was left running until 2026-12-03).
        cls.addClassCleanup(cls.server.stop)
        cls.limb = Limb()

    @classmethod
    def tearDownClass(cls) -> None:
        code = cls.server.stop()
        assert code == 0, f"sinew-server exited with {code}:\n" + "".join(cls.server.output)

    def connect(self, **options) -> sinew.Client:
        options.setdefault("token", "")
        client = sinew.connect(self.server.target, **options)
        self.addCleanup(client.close)
        return client


class FramesTest(ServerTest):
    """Upload, sessions, frames, streams and batches, compared with numpy's LBS of the same rig."""

    def setUp(self) -> None:
        self.client = self.connect()
        self.rig_id = self.client.upload_rig(limb_rig(self.limb)).rig_id

    def test_upload_is_chunked_and_deduplicated(self) -> None:
        rig = limb_rig(self.limb)
        rig.name = "limb-dedup"  # a rig this server does not hold yet
        data = rig.SerializeToString(deterministic=True)
        seen = []
        first = self.client.upload_rig(rig, progress=lambda sent, total: seen.append((sent, total)), chunk_bytes=4096)
        self.assertFalse(first.already_resident)
        self.assertEqual(first.bytes_sent, len(data))
        self.assertEqual(len(seen), -(-len(data) // 4096))  # one call per chunk
        self.assertEqual(seen[-1], (len(data), len(data)))
        self.assertEqual([s for s, _ in seen], sorted(s for s, _ in seen))
        self.assertEqual(first.info.vertex_count, self.limb.vertex_count)
        self.assertEqual(first.info.joint_count, 3)
        self.assertEqual([j.name for j in first.info.joints], self.limb.names)
        second = self.client.upload_rig(rig)
        self.assertTrue(second.already_resident)
        self.assertEqual(second.bytes_sent, 0)
        self.assertEqual(second.rig_id, first.rig_id)
        self.assertIn(first.rig_id, [r.rig_id for r in self.client.list_rigs()])
        self.client.delete_rig(first.rig_id)
        with self.assertRaises(sinew.NotFound):
            self.client.get_rig(first.rig_id)

    def test_an_exception_from_the_upload_progress_reaches_the_caller(self) -> None:
        # It ran on gRPC's thread, and the caller got a gRPC error instead (until 2026-12-03).
        rig = limb_rig(self.limb)
        rig.name = "limb-progress-raises"  # not resident: uploaded in chunks

        def progress(sent: int, total: int) -> None:
            raise ValueError(f"stop at {sent} of {total}")

        with self.assertRaisesRegex(ValueError, r"^stop at 4096 of \d+$"):
            self.client.upload_rig(rig, chunk_bytes=4096, progress=progress)
        self.assertEqual(self.client.upload_rig(rig).already_resident, False)  # the cut upload stored nothing

    def test_lbs_matches_numpy_and_rest_pose_returns_the_mesh(self) -> None:
        with self.client.create_session(self.rig_id, "lbs", backend="cpu") as session:
            self.assertEqual((session.method, session.backend, session.encoding), ("lbs", "cpu", "float32"))
            rest = session.deform(sinew.Pose(self.limb.rest_rotations, self.limb.rest_translations))
            self.assertEqual(rest.dtype, np.float32)
            self.assertEqual(rest.shape, (self.limb.vertex_count, 3))
            np.testing.assert_allclose(rest, self.limb.positions, atol=1e-6)
            for rot, trans, scale in poses(self.limb, 5):
                scale[0] = 1.25  # a uniform scale on the root
                got = session.deform(sinew.Pose(rot, trans, scale))
                np.testing.assert_allclose(got, self.limb.lbs(rot, trans, scale), atol=LBS_TOLERANCE)

    def test_world_space_pose_equals_local(self) -> None:
        rot, trans, _ = self.limb.pose(np.radians(75), np.radians(40), np.radians(10))
        world = sinew.Pose.from_matrices(self.limb.world(rot, trans), space="world")
        with self.client.create_session(self.rig_id, "lbs") as session:
            np.testing.assert_allclose(session.deform(world), session.deform(sinew.Pose(rot, trans)), atol=1e-5)

    def test_every_weight_form_gives_the_same_frames(self) -> None:
        w = self.limb.dense_weights
        rows, cols = np.nonzero(w)
        order = np.random.default_rng(1).permutation(len(rows))  # triplets in any order
        top2 = np.argsort(-w, axis=1)[:, :2]
        forms = {
            "triplets": sinew.SkinWeights.triplets(rows[order], cols[order], w[rows, cols][order], self.limb.vertex_count),
            "fixed": sinew.SkinWeights.fixed(top2, np.take_along_axis(w, top2, axis=1)),
            "csr": sinew.SkinWeights.csr(np.concatenate([[0], np.cumsum((w > 0).sum(axis=1))]), cols, w[rows, cols]),
        }
        rot, trans, _ = self.limb.pose(np.radians(100), np.radians(90))
        want = self.limb.lbs(rot, trans)
        for name, weights in forms.items():
            with self.subTest(form=name):
                np.testing.assert_allclose(weights.to_dense(self.limb.vertex_count, 3), w, atol=1e-7)
                rig_id = self.client.upload_rig(limb_rig(self.limb, weights)).rig_id
                with self.client.create_session(rig_id, "lbs") as session:
                    np.testing.assert_allclose(session.deform(sinew.Pose(rot, trans)), want, atol=LBS_TOLERANCE)

    def test_explicit_inverse_binds(self) -> None:
        # The same rig given by world rest matrices and inverse binds: the same frames.
        world = self.limb.rest_world()
        skeleton = sinew.Skeleton.from_world_matrices(self.limb.names, self.limb.parents, world, np.linalg.inv(world))
        np.testing.assert_allclose(skeleton.rest_translations, self.limb.rest_translations, atol=1e-12)
        rig = sinew.build_rig(self.limb.positions, skeleton, sinew.SkinWeights.dense(self.limb.dense_weights))
        rot, trans, _ = self.limb.pose(np.radians(60), np.radians(30))
        with self.client.create_session(self.client.upload_rig(rig).rig_id, "lbs") as session:
            np.testing.assert_allclose(session.deform(sinew.Pose(rot, trans)), self.limb.lbs(rot, trans),
                                       atol=LBS_TOLERANCE)

    def test_stream_yields_every_frame_in_order(self) -> None:
        pose_list = list(poses(self.limb, 40))
        produced = []
        received = []
        ahead = []  # poses drawn beyond the frames the loop has seen, at each draw

        def live():  # a generator read only as frames come back
            for i, (rot, trans, _) in enumerate(pose_list):
                produced.append(i)
                ahead.append(i - len(received))
                yield sinew.Pose(rot, trans)

        with self.client.create_session(self.rig_id, "lbs") as session:
            frames = []
            for f in session.stream(live(), window=3, first_frame=100):
                received.append(f.frame)
                frames.append(f)
            self.assertEqual([f.frame for f in frames], list(range(100, 140)))
            self.assertEqual(produced, list(range(40)))
            # Back-pressure: pose i is drawn only once frame i - 3 has been decoded (its slot freed
            # just before the loop sees it), never further ahead however fast the server answers.
            self.assertLessEqual(max(ahead), 3)
            for f, (rot, trans, _) in zip(frames, pose_list, strict=True):
                self.assertEqual(f.method, "lbs")
                np.testing.assert_allclose(f.positions, self.limb.lbs(rot, trans), atol=LBS_TOLERANCE)
            self.assertEqual(session.refresh().frames, 40)

    def test_stream_stops_when_the_loop_breaks(self) -> None:
        drawn = []

        def infinite():
            for i in range(10 ** 9):
                drawn.append(i)
                yield sinew.Pose(*self.limb.pose(np.radians(i % 90))[:2])

        with self.client.create_session(self.rig_id, "lbs") as session:
            for f in session.stream(infinite(), window=2):
                if f.frame == 5:
                    break
            # Frames 0..5 were seen: at most 2 more poses were drawn, and none after the break.
            self.assertLessEqual(len(drawn), 8)
            # The session is still usable after the cancelled stream.
            rot, trans, _ = self.limb.pose(0.3)
            np.testing.assert_allclose(session.deform(sinew.Pose(rot, trans)), self.limb.lbs(rot, trans),
                                       atol=LBS_TOLERANCE)
            self.assertLessEqual(len(drawn), 8)

    def test_a_session_closed_by_its_stream_leaves_its_with_block_quietly(self) -> None:
        # close_with_stream: the server closes the session when the stream ends; the `with`
        # block's close then finds none (until 2026-12-03 it raised NotFound).
        pose_list = [sinew.Pose(rot, trans) for rot, trans, _ in poses(self.limb, 3)]
        with self.client.create_session(self.rig_id, "lbs") as session:
            got = [f.frame for f in session.stream(pose_list, close_with_stream=True)]
            self.assertEqual(got, [0, 1, 2])
            for _ in range(200):  # the server closes it as the stream ends, after the last answer
                if session.id not in [x.id for x in self.client.list_sessions()]:
                    break
                threading.Event().wait(0.05)
        self.assertNotIn(session.id, [x.id for x in self.client.list_sessions()])
        # A session closed by someone else, no stream of ours involved, is still reported.
        with self.assertRaises(sinew.NotFound):
            with self.client.create_session(self.rig_id, "lbs") as other:
                self.client.session(other.id).close()

    def test_a_frame_number_that_cannot_be_sent_takes_no_number(self) -> None:
        with self.client.create_session(self.rig_id, "lbs") as session:
            rest = sinew.Pose(self.limb.rest_rotations, self.limb.rest_translations)
            self.assertEqual(session.request(rest).frame, 0)
            for bad in (-1, 1.5, 2**64, True):
                with self.assertRaisesRegex(sinew.InvalidArgument, r"^INVALID_ARGUMENT: frame: "):
                    session.request(rest, frame=bad)
            self.assertEqual(session.request(rest).frame, 1)  # numbering unchanged by the refusals
            self.assertEqual(session.request(rest, frame=np.uint64(7)).frame, 7)

    def test_stream_and_batch_arguments_are_checked_when_called(self) -> None:
        with self.client.create_session(self.rig_id, "lbs") as session:
            with self.assertRaisesRegex(sinew.InvalidArgument, "window"):
                session.stream([], window=0)  # not only once iterated
            with self.assertRaisesRegex(sinew.InvalidArgument, r"outputs\.nope"):
                session.stream([], outputs={"nope": True})
            with self.assertRaisesRegex(sinew.InvalidArgument, "clip or poses"):
                session.iter_clip()
            with self.assertRaisesRegex(sinew.InvalidArgument, "first_frame"):
                session.iter_clip(poses=[], first_frame=-1)
            # One pose where a sequence is asked for: until 2026-12-07 stream() returned, and the
            # TypeError came out of gRPC's thread as "UNKNOWN: Exception iterating requests!".
            pose = sinew.Pose(*self.limb.pose(0.3)[:2])
            with self.assertRaisesRegex(sinew.InvalidArgument, r"poses: Pose is not iterable.*\[pose\]"):
                session.stream(pose)
            self.assertEqual(len(list(session.stream([pose]))), 1)  # the session still streams

    def test_a_bad_frame_does_not_end_the_stream(self) -> None:
        good = [sinew.Pose(*self.limb.pose(np.radians(a))[:2]) for a in (10, 20, 30)]
        bad_rot = good[1].rotations.copy()
        bad_rot[1] = [0.9, 0, 0, 1]  # not unit length
        bad = sinew.Pose(bad_rot, good[1].translations)
        with self.client.create_session(self.rig_id, "lbs") as session:
            frames = list(session.stream([good[0], bad, good[2]], raise_errors=False, first_frame=0))
            self.assertEqual([f.frame for f in frames], [0, 1, 2])
            self.assertIsNone(frames[0].error)
            self.assertIsInstance(frames[1].error, sinew.InvalidArgument)
            self.assertEqual(frames[1].error.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("pose.rotations[1]", frames[1].error.message)
            self.assertIsNone(frames[1].positions)
            self.assertIsNotNone(frames[2].positions)
            with self.assertRaises(sinew.InvalidArgument) as raised:
                list(session.stream([good[0], bad, good[2]], first_frame=10))
            self.assertEqual(raised.exception.frame, 11)
            self.assertIn("pose.rotations[1]", str(raised.exception))
            # A unary frame's refusal (a gRPC status) names its frame too.
            with self.assertRaises(sinew.InvalidArgument) as unary:
                session.deform(bad, frame=20)
            self.assertEqual(unary.exception.frame, 20)
            self.assertIn("frame 20: ", str(unary.exception))

    def test_a_pose_that_cannot_be_sent_is_raised(self) -> None:
        def broken():
            yield sinew.Pose(*self.limb.pose(0.1)[:2])
            raise ValueError("no more poses")

        with self.client.create_session(self.rig_id, "lbs") as session:
            with self.assertRaisesRegex(ValueError, "no more poses"):
                list(session.stream(broken()))

    def test_clip_batch_with_progress_and_resume(self) -> None:
        # The elbow turns from 0 to 90 degrees about z over one second; slerp about one axis is
        # linear in the angle, so frame i at i / 30 s has the angle 90 i / 30 degrees.
        angles = np.radians([0.0, 90.0])
        track = sinew.Track(joint=1, rotation_times=np.array([0.0, 1.0]),
                            rotations=np.array([quat_axis_angle([0, 0, 1], a) for a in angles]))
        clip = sinew.Clip(duration=1.0, tracks=[track], name="bend")
        progress = []
        with self.client.create_session(self.rig_id, "lbs") as session:
            frames = session.deform_clip(clip, fps=30, progress=lambda done, total: progress.append((done, total)))
            self.assertEqual(frames.shape, (31, self.limb.vertex_count, 3))
            self.assertEqual(progress, [(i, 31) for i in range(1, 32)])
            for i in (0, 10, 30):
                rot, trans, _ = self.limb.pose(np.radians(90.0 * i / 30))
                np.testing.assert_allclose(frames[i], self.limb.lbs(rot, trans), atol=LBS_TOLERANCE)
            resumed = list(session.iter_clip(clip, fps=30, first_frame=20, max_frames=5))
            self.assertEqual([f.frame for f in resumed], list(range(20, 25)))
            self.assertEqual(resumed[0].total_frames, 31)
            self.assertEqual({f.method for f in resumed}, {"lbs"})  # DeformClipResponse.method
            self.assertAlmostEqual(resumed[0].time_seconds, 20 / 30)
            for f in resumed:
                np.testing.assert_array_equal(f.positions, frames[f.frame])

    def test_pose_list_batch(self) -> None:
        pose_list = [sinew.Pose(rot, trans) for rot, trans, _ in poses(self.limb, 7)]
        seen = []
        with self.client.create_session(self.rig_id, "lbs") as session:
            batch = session.deform_batch(pose_list, progress=lambda d, t: seen.append((d, t)))
            self.assertEqual(seen[-1], (7, 7))
            for p, got in zip(pose_list, batch, strict=True):
                np.testing.assert_array_equal(got, session.deform(p))
            # An empty list is an empty batch (until 2026-12-07 the request named no source and was
            # refused INVALID_ARGUMENT "source: give a clip ... or poses").
            self.assertEqual(session.deform_batch([]).shape, (0, self.limb.vertex_count, 3))
            self.assertEqual(list(session.iter_clip(poses=[])), [])

    def test_a_batch_is_decoded_into_one_array_without_a_second_copy(self) -> None:
        # deform_clip and deform_batch allocate the (frames, V, 3) result once and decode each frame
        # into its row: until 2026-12-07 they kept every frame in a list and np.stack-ed it, two
        # whole copies at the peak (here 2.04 times the result; now 1.02 to 1.03). Beside the
        # result, one frame's bytes and positions are alive at a time, 1/300 of it each.
        import tracemalloc
        pose_list = [sinew.Pose(rot, trans) for rot, trans, _ in poses(self.limb, 300)]
        track = sinew.Track(joint=1, rotation_times=np.array([0.0, 10.0]),
                            rotations=np.array([quat_axis_angle([0, 0, 1], a) for a in np.radians([0.0, 90.0])]))
        clip = sinew.Clip(duration=10.0, tracks=[track], name="long-bend")  # 301 frames at 30 fps
        with self.client.create_session(self.rig_id, "lbs") as session:
            for what, frames, run in (
                    ("deform_batch", 300, lambda: session.deform_batch(pose_list)),
                    ("deform_clip", 301, lambda: session.deform_clip(clip, fps=30)),
                    ("deform_clip resumed", 150, lambda: session.deform_clip(clip, fps=30, first_frame=100,
                                                                             max_frames=150))):
                tracemalloc.start()
                try:
                    before = tracemalloc.get_traced_memory()[0]
                    result = run()
                    peak = tracemalloc.get_traced_memory()[1] - before
                finally:
                    tracemalloc.stop()
                self.assertEqual((result.shape, result.dtype), ((frames, self.limb.vertex_count, 3), np.float32))
                self.assertLess(peak, 1.3 * result.nbytes, f"{what}: peak {peak} bytes for a result of {result.nbytes}")
            # The rows are the frames, in order.
            np.testing.assert_array_equal(session.deform_batch(pose_list[:3]),
                                          np.stack([session.deform(p) for p in pose_list[:3]]))
            np.testing.assert_array_equal(result, session.deform_clip(clip, fps=30)[100:250])

    def test_parameters_and_pipelines(self) -> None:
        rot, trans, _ = self.limb.pose(np.radians(110), np.radians(170))
        pose = sinew.Pose(rot, trans)
        with self.client.create_session(self.rig_id, "lbs") as lbs, \
                self.client.create_session(self.rig_id, "dqs") as dqs, \
                self.client.create_session(self.rig_id, "blend", {"weight": 0.25}) as blend:
            a, b, c = lbs.deform(pose), dqs.deform(pose), blend.deform(pose)
            self.assertGreater(np.abs(a - b).max(), 0.05)  # the twisted wrist: LBS collapses, DQS does not
            np.testing.assert_allclose(c, 0.75 * a + 0.25 * b, atol=1e-5)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"params\.nope"):
            self.client.create_session(self.rig_id, "blend", {"nope": 1})
        with self.assertRaisesRegex(sinew.InvalidArgument, "method: 'skinny'"):
            self.client.create_session(self.rig_id, "skinny")
        with self.client.create_session(self.rig_id, "lbs+dqs") as pipeline:
            self.assertEqual(pipeline.method, "lbs+dqs")
            self.assertEqual(pipeline.deform_frame(pose).method, "lbs+dqs")  # not "?"
        config = self.client.deformer_config("dqs+implicit", {"implicit": {"sigma": 0.3, "default_operator": "bulge"}})
        self.assertEqual([s.method for s in config.stages], [sinew.pb.METHOD_DQS, sinew.pb.METHOD_IMPLICIT])
        self.assertAlmostEqual(config.stages[1].implicit.sigma, 0.3)
        self.assertEqual(config.stages[1].implicit.default_operator, sinew.pb.JOINT_OPERATOR_BULGE)
        with self.assertRaisesRegex(sinew.InvalidArgument, "bulgy"):
            self.client.deformer_config("implicit", {"default_operator": "bulgy"})
        # Shapes that are not the message's name the field and the index (until 2026-12-01 they
        # raised a bare AttributeError).
        joints = {"joint": 1, "op": "bulge"}
        config = self.client.deformer_config("implicit", {"joints": [joints]})
        self.assertEqual(config.implicit.joints[0].op, sinew.pb.JOINT_OPERATOR_BULGE)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"params\.joints\[1\]: expected a dict"):
            self.client.deformer_config("implicit", {"joints": [joints, 5]})
        with self.assertRaisesRegex(sinew.InvalidArgument, r"params\.joints: expected a list, not dict"):
            self.client.deformer_config("implicit", {"joints": {5: "bulge"}})
        with self.assertRaisesRegex(sinew.InvalidArgument, r"params\.joints\[0\]\.op: 'glue' is not one of"):
            self.client.deformer_config("implicit", {"joints": [{"joint": 1, "op": "glue"}]})

    def test_a_session_object_for_an_existing_session_continues_its_numbering(self) -> None:
        pose = sinew.Pose(*self.limb.pose(0.5)[:2])
        with self.client.create_session(self.rig_id, "lbs") as session:
            for _ in range(3):
                session.deform(pose)
            # A stateful session would refuse frame 0 again: the numbers go on after the last one.
            self.assertEqual(self.client.session(session.id).deform_frame(pose).frame, 3)
            listed = [s for s in self.client.list_sessions() if s.id == session.id]
            self.assertEqual(listed[0].deform_frame(pose).frame, 4)

    def test_sessions_are_listed_and_closed(self) -> None:
        session = self.client.create_session(self.rig_id, "dqs", expected_joint_names=self.limb.names)
        self.assertIn(session.id, [s.id for s in self.client.list_sessions()])
        self.assertEqual(self.client.session(session.id).method, "dqs")
        session.deform(sinew.Pose(*self.limb.pose(0.5)[:2]))
        self.assertEqual(session.close(), 1)
        with self.assertRaises(sinew.NotFound):
            session.refresh()
        with self.client.create_session(self.rig_id) as s:
            sid = s.id
        self.assertNotIn(sid, [x.id for x in self.client.list_sessions()])


class EncodingsTest(ServerTest):
    """float16, QUANTIZED16 and DELTA frames within their stated bounds of the float32 frames, and
    decoded bit for bit as the C++ client's PositionDecoder decodes them."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        client = sinew.connect(cls.server.target, token="")
        cls.rig_id = client.upload_rig(limb_rig(cls.limb)).rig_id
        cls.poses = [sinew.Pose(rot, trans) for rot, trans, _ in poses(cls.limb, 24)]
        with client.create_session(cls.rig_id, "dqs") as exact:
            cls.exact = [f.positions for f in exact.stream(cls.poses)]
        client.close()
        lo, hi = cls.limb.positions.min(axis=0), cls.limb.positions.max(axis=0)
        cls.diagonal = float(np.linalg.norm(hi.astype(np.float64) - lo))

    def test_float16_within_its_relative_bound(self) -> None:
        # Round to nearest half: within 2^-11 of |x|, or for |x| below 2^-14 (half's subnormals,
        # spaced 2^-24) within 2^-25.
        with self.connect().create_session(self.rig_id, "dqs", encoding="f16") as s:
            for f, want in zip(s.stream(self.poses), self.exact, strict=True):
                err = np.abs(f.positions.astype(np.float64) - want)
                bound = np.maximum(np.abs(want) * 2.0 ** -11, 2.0 ** -25)
                self.assertTrue((err <= bound).all(), (err / bound).max())

    def test_quantized16_within_half_a_step(self) -> None:
        with self.connect().create_session(self.rig_id, "dqs", encoding="q16") as s:
            for f, want in zip(s.stream(self.poses), self.exact, strict=True):
                half_step = (want.max(axis=0).astype(np.float64) - want.min(axis=0)) / 65535 / 2
                err = np.abs(f.positions.astype(np.float64) - want)
                self.assertTrue((err <= half_step * (1 + 1e-6) + 1e-7).all(), (err / half_step).max())

    def test_delta_within_max_error_in_every_frame(self) -> None:
        for max_error in (1e-4, 1e-3):
            with self.connect().create_session(self.rig_id, "dqs", encoding="delta", max_error=max_error,
                                               key_frame_interval=8) as s:
                key_frames = []
                for f, want in zip(s.stream(self.poses), self.exact, strict=True):
                    key_frames.append(f.response.quantization.key_frame)
                    err = np.linalg.norm(f.positions.astype(np.float64) - want, axis=1).max()
                    self.assertLessEqual(err, max_error * self.diagonal * (1 + 1e-6), f"frame {f.frame}")
                self.assertEqual(key_frames, [i % 8 == 0 for i in range(len(self.poses))])
                # Unary frames of a delta session are key frames.
                np.testing.assert_allclose(s.deform(self.poses[3]), self.exact[3], atol=max_error * self.diagonal)

    def test_decoders_match_the_cpp_decoder_bit_for_bit(self) -> None:
        tool = os.environ.get("SINEW_DECODE_FRAMES", "")
        self.assertTrue(os.access(tool, os.X_OK), f"SINEW_DECODE_FRAMES={tool!r}")
        for encoding in ("f32", "f16", "q16", "delta"):
            with self.subTest(encoding=encoding), \
                    self.connect().create_session(self.rig_id, "dqs", encoding=encoding,
                                                  key_frame_interval=10 if encoding == "delta" else 0) as s:
                frames = list(s.stream(self.poses))
                mine = np.stack([f.positions for f in frames])
                with tempfile.TemporaryDirectory() as tmp:
                    src, dst = os.path.join(tmp, "frames"), os.path.join(tmp, "xyz")
                    with open(src, "wb") as out:
                        for f in frames:
                            data = f.response.SerializeToString()
                            out.write(struct.pack("<I", len(data)) + data)
                    subprocess.run([tool, src, dst], check=True)
                    with open(dst, "rb") as inp:
                        theirs = np.frombuffer(inp.read(), dtype="<f4").reshape(mine.shape)
                self.assertEqual(mine.tobytes(), theirs.tobytes())

    def test_delta_decoder_refuses_frames_out_of_order_and_damaged_bytes(self) -> None:
        with self.connect().create_session(self.rig_id, "dqs", encoding="delta", key_frame_interval=100) as s:
            responses = [f.response for f in s.stream(self.poses[:4])]
        in_order = sinew.PositionDecoder()
        want = [in_order.decode(r) for r in responses]
        decoder = sinew.PositionDecoder()
        np.testing.assert_array_equal(decoder.decode(responses[0]), want[0])
        with self.assertRaisesRegex(sinew.FailedPrecondition, "2 frames after its key frame"):
            decoder.decode(responses[2])  # frame 1 was missed
        np.testing.assert_array_equal(decoder.decode(responses[1]), want[1])  # the state was kept
        damaged = type(responses[2])()
        damaged.CopyFrom(responses[2])
        damaged.positions = damaged.positions[:-3]
        with self.assertRaises(sinew.DataLoss):
            decoder.decode(damaged)
        damaged.positions = responses[2].positions + b"\0"
        with self.assertRaisesRegex(sinew.DataLoss, "1 bytes after"):
            decoder.decode(damaged)
        wide = bytearray(responses[2].positions)
        wide[0] = 33  # the first block's width byte: at most 32 bits
        damaged.positions = bytes(wide)
        with self.assertRaisesRegex(sinew.DataLoss, "x coordinates' block 0 \\(byte 0\\) says 33 bits a value; at most 32"):
            decoder.decode(damaged)
        np.testing.assert_array_equal(decoder.decode(responses[2]), want[2])
        with self.assertRaisesRegex(sinew.FailedPrecondition, "between key frames"):
            sinew.decode_positions(responses[3].positions, responses[3].vertex_count, responses[3].encoding,
                                   sinew.Quantization.from_proto(responses[3].quantization))


class ErrorsTest(ServerTest):
    """Errors are raised as SinewError subclasses with the gRPC code and the server's message."""

    def test_bad_joint_index_names_the_field(self) -> None:
        client = self.connect()
        joints = np.zeros((self.limb.vertex_count, 1), dtype=np.int64)
        joints[7, 0] = 99
        rig = limb_rig(self.limb, sinew.SkinWeights.fixed(joints, np.ones_like(joints, dtype=np.float32)))
        with self.assertRaises(sinew.InvalidArgument) as raised:
            client.upload_rig(rig)
        e = raised.exception
        self.assertIsInstance(e, sinew.SinewError)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("rig.weights.joints[7]", e.message)
        self.assertIn("99", e.message)
        # Errors cross process boundaries (multiprocessing pools) whole.
        copy = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(copy), copy.code, copy.message, copy.frame, str(copy)),
                         (type(e), e.code, e.message, e.frame, str(e)))
        framed = pickle.loads(pickle.dumps(sinew.error_for(13, "boom", frame=7)))
        self.assertEqual((type(framed), framed.frame, str(framed)), (sinew.Internal, 7, "INTERNAL: frame 7: boom"))

    def test_unknown_ids_and_bad_requests(self) -> None:
        client = self.connect()
        with self.assertRaises(sinew.NotFound):
            client.create_session("0" * 64, "lbs")
        with self.assertRaises(sinew.NotFound):
            client.session("s-nope")
        rig_id = client.upload_rig(limb_rig(self.limb)).rig_id
        with client.create_session(rig_id, "lbs") as s:
            with self.assertRaisesRegex(sinew.InvalidArgument, "pose"):
                s.deform(sinew.Pose(np.tile([0, 0, 0, 1.0], (2, 1)), np.zeros((2, 3))))  # 2 joints, not 3
        with self.assertRaisesRegex(sinew.InvalidArgument, r"positions: shape \(5, 2\)"):
            sinew.build_rig(np.zeros((5, 2)), sinew.Skeleton(["a"], [-1], [[0, 0, 0, 1]], [[0, 0, 0]]),
                            sinew.SkinWeights.dense(np.ones((5, 1))))
        with self.assertRaisesRegex(sinew.InvalidArgument, r"pose.matrices\[1\]: not a rotation"):
            sinew.Pose.from_matrices(np.stack([np.eye(4), np.diag([1.0, 2.0, 1.0, 1.0])]))
        with self.assertRaisesRegex(sinew.InvalidArgument, "encoding"):
            client.create_session(rig_id, encoding="f8")

    def test_malformed_arrays_are_invalid_arguments_naming_the_field(self) -> None:
        # Client-side checks raise InvalidArgument naming the field and index, not numpy's own
        # errors, and indices are not cast silently (until 2026-12-03 -1 became 4294967295, 1.7
        # became 1, a (J, 4, 3) matrix stack failed with IndexError).
        skeleton = sinew.Skeleton(["a"], [-1], [[0, 0, 0, 1]], [[0, 0, 0]])
        weights = sinew.SkinWeights.dense(np.ones((3, 1)))
        tri = np.zeros((3, 3))
        for triangles, pattern in (([[0, 1, -1]], r"triangles\[0, 2\]: -1 is negative"),
                                   ([[0, 1, 1.7]], r"triangles\[0, 2\]: .*1\.7.* is not an integer"),
                                   ([[0, 1, 2**33]], r"triangles\[0, 2\]: 8589934592 is beyond"),
                                   ([["a", "b", "c"]], r"triangles: .*expected integer indices")):
            with self.assertRaisesRegex(sinew.InvalidArgument, pattern):
                sinew.build_rig(tri, skeleton, weights, triangles)
        self.assertEqual(len(sinew.build_rig(tri, skeleton, weights, np.array([[0, 1, 2.0]])).mesh.triangles), 12)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"weights.offsets\[1\]: -2 is negative"):
            sinew.SkinWeights.csr([0, -2, 1, 3], [0, 0, 0], [1, 1, 1])
        with self.assertRaisesRegex(sinew.InvalidArgument, r"cages\['c'\].triangles\[1, 0\]: -3 is negative"):
            sinew.Cage(np.zeros((4, 3)), [[0, 1, 2], [-3, 1, 2]], name="c")
        with self.assertRaisesRegex(sinew.InvalidArgument, r"pose.translations: not an array of numbers"):
            sinew.Pose([[0, 0, 0, 1]], [[0, 0, "x"]])
        with self.assertRaisesRegex(sinew.InvalidArgument, r"pose.rotations: not an array of numbers"):
            sinew.Pose([[0, 0, "w", 1]], [[0, 0, 0]])
        with self.assertRaisesRegex(sinew.InvalidArgument, r"shape \(1, 4, 3\)"):
            sinew.Pose.from_matrices(np.zeros((1, 4, 3)))
        # Every weight form and the skeleton's parents alike (until 2026-12-03 fixed, triplets and
        # parents cast: 1.7 became 1, 2**32 + 1 became 1, a parent of 0.6 became 0).
        for make, pattern in (
                (lambda: sinew.SkinWeights.fixed([[0, 1.7]], [[0.5, 0.5]]), r"weights.joints\[0, 1\]: 1\.7 is not an integer"),
                (lambda: sinew.SkinWeights.fixed([[0, 2**32 + 1]], [[0.5, 0.5]]), r"weights.joints\[0, 1\]: 4294967297 is beyond"),
                (lambda: sinew.SkinWeights.triplets([0, 0.9], [0, 0], [1, 1], 2), r"weights.vertices\[1\]: 0\.9 is not an integer"),
                (lambda: sinew.SkinWeights.triplets([0, 1], [1.5, 2**32], [1, 1], 2), r"weights.joints\[0\]: 1\.5 is not an integer"),
                (lambda: sinew.SkinWeights(np.array([-1]), np.array([1.0])), r"weights.joints\[0\]: -1 is negative"),
                (lambda: sinew.Skeleton(["a", "b"], [-1, 0.6], [[0, 0, 0, 1]] * 2, [[0, 0, 0]] * 2),
                 r"skeleton.parents\[1\]: 0\.6 is not an integer"),
                (lambda: sinew.Skeleton(["a", "b"], [-2, 0], [[0, 0, 0, 1]] * 2, [[0, 0, 0]] * 2),
                 r"skeleton.parents\[0\]: -2 is below -1")):
            with self.assertRaisesRegex(sinew.InvalidArgument, pattern):
                make()
        self.assertEqual(sinew.Skeleton(["a", "b"], [-1, 0.0], [[0, 0, 0, 1]] * 2, [[0, 0, 0]] * 2).parents.tolist(), [-1, 0])

    def test_values_protobuf_would_refuse_are_invalid_arguments(self) -> None:
        # protobuf's own ValueError/TypeError, raised out of the client's checks until 2026-12-03.
        from sinew._proto import pb
        with self.assertRaisesRegex(sinew.InvalidArgument, r"clip.tracks\[joint -1\].joint: -1"):
            sinew.Track(joint=-1).to_proto(pb.JointTrack())
        with self.assertRaisesRegex(sinew.InvalidArgument, r"clip.tracks\[joint 1.5\].joint"):
            sinew.Track(joint=1.5).to_proto(pb.JointTrack())
        client = self.connect()
        with self.assertRaisesRegex(sinew.InvalidArgument, "create_session: "):
            client.create_session("0" * 64, "lbs", encoding="delta", max_error="x")

    def test_a_corrupt_vertex_count_is_refused_before_it_is_allocated(self) -> None:
        # A delta frame of 2**32 - 1 vertices in 10 bytes: refused by its size, not after a list of
        # 800M block starts (the C++ decoder caps the count likewise).
        quant = sinew.Quantization((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), True, 0)
        with self.assertRaisesRegex(sinew.DataLoss, "cannot hold a delta frame of 4294967295 vertices"):
            sinew.DeltaDecoder().decode(b"\0" * 10, 2**32 - 1, quant)

    def test_a_closed_clients_calls_raise_a_sinew_error(self) -> None:
        # gRPC's own is a ValueError, which callers that tolerate an unreachable server (a shared
        # memory region's close, a session's with block) let through.
        client = sinew.connect("127.0.0.1:1", token="", timeout=5)
        client.close()
        with self.assertRaisesRegex(sinew.FailedPrecondition, "client: closed"):
            client.get_rig("0" * 64)
        with self.assertRaisesRegex(sinew.FailedPrecondition, "client: closed"):
            client.session("s-1")
        with self.assertRaisesRegex(sinew.FailedPrecondition, "client: closed"):  # ValueError until 2026-12-07
            client.wait_ready(0)

    def test_a_skeletons_parents_are_a_forest_named_by_joint(self) -> None:
        # A parent past the last joint was an IndexError out of from_world_matrices, and a cycle
        # was reported at the first joint world_matrices could not place, which may hang below the
        # cycle rather than be on it (joint 1 here, until 2026-12-07).
        rot, trans = [[0, 0, 0, 1]] * 4, [[0, 0, 0]] * 4
        names = ["a", "b", "c", "d"]
        with self.assertRaisesRegex(sinew.InvalidArgument, r"skeleton.parents: a cycle through joint [23] "):
            sinew.Skeleton(names, [-1, 3, 3, 2], rot, trans)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"skeleton.parents: a cycle through joint 2 \(its parent 2\)"):
            sinew.Skeleton(names, [-1, 0, 2, 0], rot, trans)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"skeleton.parents\[3\]: 4; expected -1 \(a root\) or a joint index < 4"):
            sinew.Skeleton(names, [-1, 0, 1, 4], rot, trans)
        with self.assertRaisesRegex(sinew.InvalidArgument, r"skeleton.parents\[1\]: 2; expected"):
            sinew.Skeleton.from_world_matrices(["a", "b"], [-1, 2], np.tile(np.eye(4), (2, 1, 1)))
        skeleton = sinew.Skeleton(names, [2, 2, -1, 1], rot, [[1, 0, 0]] * 4)  # parents after children
        np.testing.assert_array_equal(skeleton.world_matrices()[:, 0, 3], [2, 2, 1, 3])
        skeleton.parents[2] = 3  # changed after construction: 1 -> 2 -> 3 -> 1
        with self.assertRaisesRegex(sinew.InvalidArgument, r"a cycle through joint [123] "):
            skeleton.world_matrices()

    def test_a_timeout_of_zero_is_no_deadline(self) -> None:
        # As in the C++ client; grpcio takes 0 as a deadline of now (until 2026-12-03 every call
        # then failed DeadlineExceeded).
        client = self.connect(timeout=0)
        self.assertIsNone(client.timeout)
        self.assertTrue(client.server_info().version)
        for bad in (-1, float("nan"), float("inf")):
            with self.assertRaisesRegex(sinew.InvalidArgument, "timeout"):
                sinew.connect(self.server.target, token="", timeout=bad)

    def test_a_per_call_timeout_of_zero_is_no_deadline(self) -> None:
        # As the client's own: until 2026-12-07 create_session(..., timeout=0) handed grpcio a
        # deadline of now and failed DeadlineExceeded. Checked as the client's, before any call.
        client = self.connect(timeout=30)
        rig_id = client.upload_rig(limb_rig(self.limb)).rig_id
        with client.create_session(rig_id, "lbs", timeout=0) as session:
            self.assertEqual(session.vertex_count, self.limb.vertex_count)
        deadlines = record_deadlines(client)
        client.create_session(rig_id, "lbs", timeout=0).close()
        self.assertIsNone(deadlines.pop("CreateSession"))  # none, over the client's 30 s too
        client.create_session(rig_id, "lbs", timeout=12.5).close()
        self.assertEqual(deadlines.pop("CreateSession"), 12.5)
        client.create_session(rig_id, "lbs").close()  # None: the client's
        self.assertEqual(deadlines.pop("CreateSession"), 30)
        for bad in (-1, float("nan"), float("inf")):
            with self.assertRaisesRegex(sinew.InvalidArgument, r"timeout: .*expected seconds >= 0"):
                client.create_session(rig_id, "lbs", timeout=bad)
        self.assertNotIn("CreateSession", deadlines)  # refused before any call

    def test_the_unary_deadline_leaves_uploads_alone(self) -> None:
        # Each call's deadline as the client sets it, the calls going on to the server: the unary
        # ones get `timeout`, the upload (whose time follows its bytes) none, as in the C++
        # client. Until 2026-12-03 the upload had it too.
        client = self.connect(timeout=30)
        deadlines = record_deadlines(client)
        rig = limb_rig(self.limb)
        rig.name = "limb-deadline"  # not resident: uploaded
        self.assertFalse(client.upload_rig(rig, chunk_bytes=4096).already_resident)
        client.list_rigs()
        self.assertEqual(deadlines, {"GetRig": 30, "UploadRig": None, "ListRigs": 30})

    def test_a_stopped_server_ends_a_call_at_the_keepalive(self) -> None:
        # A server that stops answering (its process stopped: TCP still acknowledged) ends a call
        # without a deadline as Unavailable once the keepalive ping goes unanswered; until
        # 2026-12-03 it waited forever (Blender's live frames froze the UI). Its own server: the
        # class's one must keep running.
        server = Server()
        try:
            client = sinew.connect(server.target, token="", keepalive=1)
            self.addCleanup(client.close)
            rig_id = client.upload_rig(limb_rig(self.limb)).rig_id
            session = client.create_session(rig_id, method="lbs")
            server.pause()
            outcome: list = []
            rest = sinew.Pose(self.limb.rest_rotations, self.limb.rest_translations)
            worker = threading.Thread(target=lambda: outcome.append(self._raised(lambda: session.deform(rest))),
                                      daemon=True)
            worker.start()
            worker.join(120)  # bounds a hang (the failure tested for), not the keepalive's time
            server.resume()
            self.assertFalse(worker.is_alive(), "the call to a stopped server still waited two minutes later")
            self.assertIsInstance(outcome[0], sinew.Unavailable)
        finally:
            server.resume()
            self.assertEqual(server.stop(), 0)

    def test_a_stopped_server_does_not_hold_a_session_close(self) -> None:
        # A close runs on every way out of a `with` block: bounded by sinew.CLOSE_TIMEOUT (10 s)
        # without a client timeout, as the C++ client's CloseSession, so that a server that stopped
        # answering does not hold it (until 2026-12-07 it waited forever: keepalive off here, as a
        # server alive to pings would be). Its own server: the class's one must keep running.
        server = Server()
        try:
            client = sinew.connect(server.target, token="", keepalive=0)
            self.addCleanup(client.close)
            rig = limb_rig(self.limb)
            session = client.create_session(client.upload_rig(rig).rig_id, method="lbs")
            recovering = sinew.RecoveringSession(client, rig, "lbs")
            server.pause()
            outcome: list = []

            def close_both() -> None:
                def leave_with_block() -> None:
                    with session:
                        pass
                outcome.append(self._raised(leave_with_block))
                outcome.append(self._raised(recovering.close))
                outcome.append(server.thread_states())  # before resume: all T

            worker = threading.Thread(target=close_both, daemon=True)
            worker.start()
            worker.join(120)  # bounds a hang (the failure tested for), not the close's time
            server.resume()
            self.assertFalse(worker.is_alive(), "closing a session of a stopped server still waited two minutes later")
            self.assertEqual([type(e) for e in outcome[:2]], [sinew.DeadlineExceeded, sinew.DeadlineExceeded],
                             f"{outcome}; the server's threads: {server.thread_states()} now, {outcome[2:]} "
                             "before it was resumed; its output: " + "".join(server.output[-20:]))
        finally:
            server.resume()
            self.assertEqual(server.stop(), 0)

    def test_a_server_name_without_tls_is_refused(self) -> None:
        # The name is checked against the server's certificate: without TLS there is none, and
        # until 2026-12-07 it was ignored, the connection silently plaintext (the C++ client and
        # the programs' --tls-server-name refuse it too).
        with self.assertRaisesRegex(sinew.InvalidArgument, r"server_name: .*tls=True"):
            sinew.connect(self.server.target, token="", server_name="localhost")
        sinew.connect(self.server.target, token="", tls=True, server_name="localhost").close()  # with TLS: taken

    @staticmethod
    def _raised(call):
        try:
            call()
        except Exception as e:  # what the test looks at
            return e
        return None

    def test_unreachable_server(self) -> None:
        with sinew.connect("127.0.0.1:1", token="", timeout=5) as client:
            with self.assertRaises(sinew.Unavailable):
                client.server_info()
            with self.assertRaises(sinew.Unavailable) as waited:
                client.wait_ready(timeout=0.5)
            # It says why: nothing listens there.
            self.assertIn("cannot connect to 127.0.0.1:1 within 0.5 s: ", str(waited.exception))
            self.assertIn("Connection refused", str(waited.exception))

    def test_tls_client_at_a_plaintext_server_gives_up_at_once(self) -> None:
        # Waiting cannot help: every attempt's handshake fails the same way. The message of a wait
        # that ran out says "within 20 s"; this one gives up at the first attempt (until
        # 2026-12-06 it waited all of the timeout).
        with sinew.connect(self.server.target, tls=True) as client:
            with self.assertRaises(sinew.Unavailable) as waited:
                client.wait_ready(timeout=20)
            self.assertIn(f"cannot connect to {self.server.target}: ", str(waited.exception))
            self.assertIn("not retried: the server does not speak TLS", str(waited.exception))
        # A call made without waiting says the same (until 2026-12-06 gRPC's reason alone).
        with sinew.connect(self.server.target, tls=True) as client:
            with self.assertRaises(sinew.Unavailable) as called:
                client.server_info()
            self.assertIn("wrong version number", str(called.exception))
            self.assertIn("not retried: the server does not speak TLS", str(called.exception))


TOKEN = "python-client-test-token-0123456789"


class AuthTest(ServerTest):
    """A server with --token-file: calls without the token, or with another, are UNAUTHENTICATED."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        path = os.path.join(cls.tmp.name, "tokens")
        with open(path, "w") as f:
            f.write(f"# test tokens\n{TOKEN} studio-a\n")
        cls.server_args = ("--token-file", path)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        cls.tmp.cleanup()

    def test_token(self) -> None:
        with self.assertRaises(sinew.Unauthenticated) as raised:
            self.connect().server_info()
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        self.assertNotIn(TOKEN, str(raised.exception))
        with self.assertRaises(sinew.Unauthenticated):
            self.connect(token="x" * 32).upload_rig(limb_rig(self.limb))
        client = self.connect(token=TOKEN, affinity="python-test")
        rig_id = client.upload_rig(limb_rig(self.limb)).rig_id
        with client.create_session(rig_id, "lbs") as s:
            rot, trans, _ = self.limb.pose(0.7)
            np.testing.assert_allclose(s.deform(sinew.Pose(rot, trans)), self.limb.lbs(rot, trans), atol=LBS_TOLERANCE)
            self.assertEqual(len(list(s.stream([sinew.Pose(rot, trans)] * 3))), 3)
        old = os.environ.get("SINEW_TOKEN")
        os.environ["SINEW_TOKEN"] = TOKEN  # the default token
        try:
            with sinew.connect(self.server.target) as from_env:
                self.assertIn(rig_id, [r.rig_id for r in from_env.list_rigs()])
        finally:
            if old is None:
                del os.environ["SINEW_TOKEN"]
            else:
                os.environ["SINEW_TOKEN"] = old


def make_pki(folder: str) -> None:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate (openssl)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(os.path.join(folder, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=sinew-python-test-ca", "-keyout", "ca.key", "-out", "ca.pem")
    for name, ext in (("server", ["-extfile", "san.cnf"]), ("client", [])):
        run("req", *ec, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-out", f"{name}.pem", *ext)


class MutualTlsTest(ServerTest):
    """A server with --tls-cert/--tls-key/--tls-client-ca: the client's TLS options reach it."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        make_pki(cls.tmp.name)
        d = cls.tmp.name
        cls.server_args = ("--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key",
                           "--tls-client-ca", f"{d}/ca.pem")
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        cls.tmp.cleanup()

    def test_tls_options(self) -> None:
        d = self.tmp.name
        client = self.connect(tls_ca=f"{d}/ca.pem", tls_cert=f"{d}/client.pem", tls_key=f"{d}/client.key",
                              server_name="localhost", timeout=30)
        rig_id = client.upload_rig(limb_rig(self.limb)).rig_id
        with client.create_session(rig_id, "lbs") as s:
            rot, trans, _ = self.limb.pose(0.4)
            np.testing.assert_allclose(s.deform(sinew.Pose(rot, trans)), self.limb.lbs(rot, trans), atol=LBS_TOLERANCE)
        with self.assertRaises(sinew.Unavailable):  # no client certificate: the handshake fails
            self.connect(tls_ca=f"{d}/ca.pem", timeout=30).server_info()
        with self.assertRaises(sinew.Unavailable):  # plaintext to a TLS server
            self.connect(timeout=30).server_info()
        with self.assertRaisesRegex(sinew.InvalidArgument, "together"):
            sinew.connect(self.server.target, tls_cert=f"{d}/client.pem")
        with self.assertRaisesRegex(sinew.InvalidArgument, "tls_ca: cannot read"):
            sinew.connect(self.server.target, tls_ca=f"{d}/missing.pem")

    def test_wait_ready_names_what_to_change(self) -> None:
        d = self.tmp.name
        mine = dict(tls_cert=f"{d}/client.pem", tls_key=f"{d}/client.key")
        target = self.server.target

        def reason(wait: float, **options) -> str:
            with self.assertRaises(sinew.Unavailable) as waited:
                self.connect(**options).wait_ready(timeout=wait)
            return str(waited.exception)

        # Where no later attempt can succeed it gives up at the first: the message of a wait that
        # ran out says "within 20 s" (until 2026-12-06 it waited all of it).
        why = reason(20, tls_ca=f"{d}/client.pem", **mine)  # a CA that did not sign the server's certificate
        self.assertIn(f"cannot connect to {target}: ", why)
        self.assertIn("certificate verify failed", why)
        self.assertIn("not retried: the server's certificate is not signed by a CA this client trusts: tls_ca", why)
        why = reason(20, tls_ca=f"{d}/ca.pem", server_name="elsewhere.example", **mine)
        self.assertIn(f"cannot connect to {target}: ", why)
        self.assertIn("not retried: the server's certificate is not for that name: server_name", why)
        # The server closes these connections unanswered, as one that stopped would: a hint only,
        # after the wait (1 s: time for an attempt or more).
        why = reason(1, tls_ca=f"{d}/ca.pem")
        self.assertIn(f"cannot connect to {target} within 1 s: ", why)
        self.assertIn("a server that asks for client certificates closes connections without one so", why)
        self.assertIn("a server that expects TLS closes plaintext connections so", reason(1))
        self.connect(tls_ca=f"{d}/ca.pem", server_name="localhost", **mine).wait_ready(timeout=20)

    def test_calls_name_what_to_change(self) -> None:
        # A client's calls, made without wait_ready, end with the hints wait_ready gives (until
        # 2026-12-06 with gRPC's reason alone, which names no argument).
        d = self.tmp.name
        mine = dict(tls_cert=f"{d}/client.pem", tls_key=f"{d}/client.key")

        def reason(**options) -> str:
            with self.assertRaises(sinew.Unavailable) as called:
                self.connect(timeout=30, **options).server_info()
            return str(called.exception)

        why = reason(tls_ca=f"{d}/client.pem", **mine)
        self.assertIn("certificate verify failed", why)
        self.assertIn("not retried: the server's certificate is not signed by a CA this client trusts: tls_ca", why)
        why = reason(tls_ca=f"{d}/ca.pem", server_name="elsewhere.example", **mine)
        self.assertIn("not retried: the server's certificate is not for that name: server_name", why)
        self.assertIn("a server that asks for client certificates closes connections without one so",
                      reason(tls_ca=f"{d}/ca.pem"))
        self.assertIn("a server that expects TLS closes plaintext connections so", reason())
        # A trusted client's calls carry no hint, and succeed.
        self.assertTrue(self.connect(tls_ca=f"{d}/ca.pem", server_name="localhost", **mine).server_info().version)


if __name__ == "__main__":
    unittest.main()
