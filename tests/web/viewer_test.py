#!/usr/bin/python3
"""The browser viewer (clients/web/) in real headless Chromium, on a real bake.

Starts sinew-server on a loopback port it picks, bakes BCN_Epileptic's clip twice with
`sinew batch --gltf --quality` (two methods), validates both .glb files with the Khronos glTF
validator, serves the viewer with clients/web/serve.py, and drives Debian's chromium over the
DevTools protocol: the page must load both clips and report ready, its clock must advance the
shown frame by itself (the glTF weights animation played by three.js), and screenshots at two
frames must show both meshes drawn (enough non-background pixels in each half) and differ. No
step waits for a time: each polls a state the page sets, with a generous deadline.

    viewer_test.py --server PATH --cli PATH [--out DIR] [--methods lbs,dqs]

--out keeps the screenshots (viewer-frame-N.png) and the .glb files.
"""
import argparse
import base64
import io
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import websocket  # Debian python3-websocket
from PIL import Image  # Debian python3-pil

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEB = os.path.join(SOURCE, 'clients', 'web')
CHARACTER = '/usr/share/assimp/models/X/BCN_Epileptic.X'
BACKGROUND = (0x1d, 0x20, 0x26)
DEADLINE = 240  # seconds: only a bound for a hung browser, never a pass condition
ARGS = None


def read_line(proc, pattern, what):
    """The first line of proc's stdout (or stderr) matching pattern, or a failure with its output."""
    seen = []
    for line in proc:
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f'{what} exited without printing {pattern!r}:\n' + ''.join(seen[-30:]))


class Chrome:
    """Headless chromium with its DevTools endpoint on a port it picks, one page."""

    def __init__(self, profile):
        self.proc = subprocess.Popen(
            ['chromium', '--headless', '--no-sandbox', '--disable-gpu', '--enable-unsafe-swiftshader',
             '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update',
             '--disable-sync', '--disable-extensions', '--mute-audio', f'--user-data-dir={profile}',
             '--remote-debugging-address=127.0.0.1', '--remote-debugging-port=0', '--window-size=1280,720',
             'about:blank'],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        m = read_line(self.proc.stderr, r'DevTools listening on ws://127\.0\.0\.1:(\d+)/', 'chromium')
        # Keep draining stderr so chromium never blocks on a full pipe.
        self.log = []
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()
        port = int(m.group(1))
        pages = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list', timeout=30))
        page = next(p for p in pages if p['type'] == 'page')
        self.ws = websocket.create_connection(page['webSocketDebuggerUrl'], timeout=60, suppress_origin=True)
        self.next_id = 0
        self.version = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/json/version', timeout=30))['Browser']

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({'id': self.next_id, 'method': method, 'params': params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get('id') == self.next_id:
                if 'error' in msg:
                    raise AssertionError(f'{method}: {msg["error"]}')
                return msg['result']

    def eval(self, expression):
        r = self.call('Runtime.evaluate', expression=expression, returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in r:
            raise AssertionError(f'{expression}: {r["exceptionDetails"]}')
        return r['result'].get('value')

    def wait_for(self, expression, what):
        """Polls expression until truthy (the page's own state), bounded by DEADLINE."""
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            # Between navigation and the page's first script there is no body (or no viewer) yet.
            v = self.eval(f'(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()')
            if v:
                return v
            state = self.eval('document.body && document.body.dataset.state')
            if state == 'error':
                raise AssertionError(f'viewer error while waiting for {what}: ' + str(self.eval('document.body.dataset.error')))
            time.sleep(0.05)
        raise AssertionError(f'no {what} within {DEADLINE} s; state {self.eval("JSON.stringify(sinewViewer.state())")}')

    def screenshot(self):
        data = self.call('Page.captureScreenshot', format='png')['data']
        return base64.b64decode(data)

    def close(self):
        try:
            self.ws.close()
        finally:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def glb_quality(path):
    """The per-frame quality records `sinew batch --gltf --quality` wrote into a .glb's scene extras."""
    with open(path, 'rb') as f:
        data = f.read()
    length, kind = struct.unpack_from('<II', data, 12)  # the first chunk: the JSON
    assert kind == 0x4E4F534A, f'{path}: the first chunk is not JSON'
    return json.loads(data[20:20 + length])['scenes'][0]['extras']['sinew']['quality']


def drawn_fraction(img, box):
    """Fraction of pixels in box (l, t, r, b) that differ from the background."""
    crop = img.crop(box).convert('RGB')
    px = crop.getdata()
    far = sum(1 for p in px if max(abs(p[0] - BACKGROUND[0]), abs(p[1] - BACKGROUND[1]), abs(p[2] - BACKGROUND[2])) > 24)
    return far / max(1, len(px))


def changed_fraction(a, b, box):
    pa, pb = a.crop(box).convert('RGB').getdata(), b.crop(box).convert('RGB').getdata()
    diff = sum(1 for x, y in zip(pa, pb) if max(abs(x[0] - y[0]), abs(x[1] - y[1]), abs(x[2] - y[2])) > 24)
    return diff / max(1, len(pa))


class ViewerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(CHARACTER):
            raise unittest.SkipTest('assimp-testmodels not installed')
        for need in ('chromium', 'node'):
            if shutil.which(need) is None:
                raise AssertionError(f'{need} not found: run scripts/install-deps.sh')
        cls.tmp = tempfile.mkdtemp(prefix='sinew-web-')
        # A cache folder of its own (not the user's ~/.cache/sinew), with the suite's operator
        # grids linked in when ctest names them.
        cache = os.path.join(cls.tmp, 'server-cache')
        os.makedirs(cache)
        ops = os.environ.get('SINEW_TEST_OPERATOR_CACHE', '')
        for name in (os.listdir(ops) if ops and os.path.isdir(ops) else []):
            if name.endswith('.sinewop'):
                os.symlink(os.path.join(ops, name), os.path.join(cache, name))
        cls.server = subprocess.Popen([ARGS.server, '--listen', '127.0.0.1:0', '--metrics-listen', '', '--gpu', 'off',
                                       '--cache-dir', cache],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        # Stopped and removed even when the rest of setUpClass fails (unittest then skips
        # tearDownClass; the server, in its own session, outlived the test until 2026-12-03).
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.addClassCleanup(lambda: cls.server.poll() is None and (cls.server.kill(), cls.server.wait(30)))
        cls.target = read_line(cls.server.stdout, r'grpc listening on (\S+)', 'sinew-server').group(1)
        cls.glbs = []
        for method in ARGS.methods.split(','):
            out = os.path.join(cls.tmp, f'bcn-{method.replace("+", "-")}.glb')
            r = subprocess.run([ARGS.cli, '--target', cls.target, 'batch', CHARACTER, '--method', method, '--clip-fps', '30',
                                '--gltf', out, '--quality'], capture_output=True, text=True)
            if r.returncode != 0:
                raise AssertionError(f'sinew batch --method {method} failed:\n{r.stdout}\n{r.stderr}')
            cls.glbs.append(out)
        cls.web = None
        cls.chrome = None

    @classmethod
    def tearDownClass(cls):
        for p in (cls.chrome,):
            if p:
                p.close()
        for proc in (cls.web, cls.server):
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        if ARGS.out:
            os.makedirs(ARGS.out, exist_ok=True)
            for f in os.listdir(cls.tmp):
                if os.path.isfile(os.path.join(cls.tmp, f)):
                    shutil.copy(os.path.join(cls.tmp, f), ARGS.out)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_1_glb_files_pass_the_khronos_validator(self):
        r = subprocess.run(['node', os.path.join(WEB, 'tools', 'validate-gltf.mjs'), *self.glbs], capture_output=True, text=True)
        print(r.stdout, end='')
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count(': 0 errors, 0 warnings'), len(self.glbs), r.stdout)

    def test_1b_serve_py_urls_reach_clips_whatever_their_names(self):
        """The printed URL's clip paths, read as the viewer reads them (the query unquoted once, then
        fetched as a path), reach the file for a name with '#', '?', '%' or a space (until
        2026-12-03 a '#' cut the path short: 404)."""
        odd = os.path.join(self.tmp, 'odd #1 ?50%.glb')
        shutil.copy(self.glbs[0], odd)
        web = subprocess.Popen([sys.executable, os.path.join(WEB, 'serve.py'), odd],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            url = read_line(web.stdout, r'viewer: (http://\S+)', 'serve.py').group(1)
            parts = urllib.parse.urlsplit(url)
            clip = urllib.parse.parse_qs(parts.query)['a'][0]
            with urllib.request.urlopen(f'{parts.scheme}://{parts.netloc}{clip}', timeout=30) as r:
                self.assertEqual(r.read(), open(odd, 'rb').read())
            # A page served under another name that resolves to loopback (DNS rebinding) is
            # refused; loopback names are served (until 2026-12-03 every Host was).
            for host, code in (('rebound.example:80', 403), (f'localhost:{parts.port}', 200),
                               (f'127.0.0.1:{parts.port}', 200)):
                req = urllib.request.Request(f'{parts.scheme}://{parts.netloc}{clip}', headers={'Host': host})
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        got = r.status
                except urllib.error.HTTPError as e:
                    got = e.code
                self.assertEqual(got, code, host)
        finally:
            web.send_signal(signal.SIGTERM)
            web.wait(30)

    def test_2_viewer_plays_both_clips_side_by_side(self):
        cls = type(self)
        cls.web = subprocess.Popen([sys.executable, os.path.join(WEB, 'serve.py'), *self.glbs],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        url = read_line(cls.web.stdout, r'viewer: (http://\S+)', 'serve.py').group(1)
        cls.chrome = Chrome(os.path.join(self.tmp, 'profile'))
        chrome = cls.chrome
        chrome.call('Page.enable')
        chrome.call('Runtime.enable')
        chrome.call('Page.navigate', url=url)
        chrome.wait_for('document.body && document.body.dataset.state === "ready"', 'both clips loaded')
        state = chrome.eval('sinewViewer.state()')
        three = chrome.eval('import("three").then((t) => t.REVISION)')
        print(f'{chrome.version}, three.js r{three}: {json.dumps(state["slots"])}')
        methods = ARGS.methods.split(',')
        self.assertEqual([s['method'] for s in state['slots']], methods)
        self.assertEqual([s['frames'] for s in state['slots']], [100, 100])  # 3.3 s at 30 frames/s
        self.assertTrue(all(s['quality'] for s in state['slots']))

        # It plays by itself: the frame the glTF animation shows moves on.
        start = int(chrome.wait_for('document.body.dataset.frameA', 'a first frame'))
        chrome.wait_for(f'Number(document.body.dataset.frameA) !== {start}', 'the shown frame to advance')

        box = chrome.eval('(() => { const r = document.getElementById("view").getBoundingClientRect();'
                          ' return [r.left, r.top, r.right, r.bottom].map((x) => Math.round(x * devicePixelRatio)); })()')
        left, top, right, bottom = box
        mid = (left + right) // 2
        shots = {}
        for frame in (10, 60):
            chrome.eval(f'sinewViewer.seek({frame})')
            renders = int(chrome.wait_for(
                f'document.body.dataset.frameA === "{frame}" && document.body.dataset.frameB === "{frame}" && document.body.dataset.renders',
                f'frame {frame} shown'))
            chrome.wait_for(f'Number(document.body.dataset.renders) >= {renders + 2}', 'two more frames drawn')
            panel = chrome.eval('document.querySelector("#panel-a .v-frame").textContent')
            self.assertEqual(panel, str(frame), 'the quality panel follows the shown frame')
            fresh = chrome.eval('document.querySelector("#panel-a .v-new").textContent')
            q = glb_quality(self.glbs[0])[frame]
            want = f'{q["new_inside_vertices"]} ({q["rest_inside_vertices"]} inside at rest)'
            if q['new_inside_vertices'] > 0:
                want += f'; deepest at vertex {q["new_deepest_vertex"]} ({q["new_deepest_joint"]})'
            self.assertEqual(fresh, want, 'the new-inside count and where, from this batch\'s file')
            exposed = chrome.eval('document.querySelector("#panel-a .v-exposed").textContent')
            self.assertEqual(exposed, str(q['exposed_vertices']), 'the hidden skin brought out, from this batch\'s file')
            png = chrome.screenshot()
            with open(os.path.join(self.tmp, f'viewer-frame-{frame}.png'), 'wb') as f:
                f.write(png)
            img = Image.open(io.BytesIO(png)).convert('RGB')
            shots[frame] = img
            for name, half in (('A', (left, top, mid, bottom)), ('B', (mid, top, right, bottom))):
                frac = drawn_fraction(img, half)
                print(f'frame {frame}, view {name}: {100 * frac:.1f} % of pixels drawn')
                self.assertGreater(frac, 0.01, f'view {name} at frame {frame}: mesh not drawn')
                self.assertLess(frac, 0.6, f'view {name} at frame {frame}: the view is filled, not a mesh')
        changed = changed_fraction(shots[10], shots[60], (left, top, right, bottom))
        print(f'frames 10 and 60 differ in {100 * changed:.1f} % of the pixels')
        self.assertGreater(changed, 0.005)

        # At the frame where A's skin folds most, the panel says where its deepest new fold is.
        records = glb_quality(self.glbs[0])
        worst = max(range(len(records)), key=lambda k: records[k]['new_inside_vertices'])
        q = records[worst]
        self.assertGreater(q['new_inside_vertices'], 0, f'{ARGS.methods.split(",")[0]} folds BCN somewhere')
        chrome.eval(f'sinewViewer.seek({worst})')
        chrome.wait_for(f'document.querySelector("#panel-a .v-frame").textContent === "{worst}"', f'frame {worst}\'s panel')
        fresh = chrome.eval('document.querySelector("#panel-a .v-new").textContent')
        print(f'frame {worst}: new inside {fresh}')
        self.assertEqual(fresh, f'{q["new_inside_vertices"]} ({q["rest_inside_vertices"]} inside at rest); deepest at '
                                f'vertex {q["new_deepest_vertex"]} ({q["new_deepest_joint"]})')
        # And where the most skin hidden at rest comes out (BCN's left thumb lies in its hand at rest,
        # its meshes overlap), the panel counts it.
        most = max(range(len(records)), key=lambda k: records[k]['exposed_vertices'])
        self.assertGreater(records[most]['exposed_vertices'], 0, 'a pose brings some of BCN\'s hidden skin out')
        chrome.eval(f'sinewViewer.seek({most})')
        chrome.wait_for(f'document.querySelector("#panel-a .v-frame").textContent === "{most}"', f'frame {most}\'s panel')
        self.assertEqual(chrome.eval('document.querySelector("#panel-a .v-exposed").textContent'),
                         str(records[most]['exposed_vertices']))
        # The chart over the clip: a bar a frame up from the bottom where the pose put vertices
        # inside the skin, one down from the top where it brought hidden skin out, the maxima in
        # the legends; all from this batch's file.
        chart = chrome.eval('(() => { const p = document.querySelector("#panel-a svg");'
                            ' const bars = (c) => (p.querySelector(c).getAttribute("d").match(/M/g) || []).length;'
                            ' return {inside: bars(".chart-inside"), exposed: bars(".chart-exposed"),'
                            ' legend_inside: document.querySelector("#panel-a .legend-inside").textContent,'
                            ' legend_exposed: document.querySelector("#panel-a .legend-exposed").textContent,'
                            ' width: p.getBoundingClientRect().width / p.parentElement.getBoundingClientRect().width};'
                            ' })()')
        print(f'chart of A: {chart}')
        self.assertEqual(chart['inside'], sum(1 for r in records if r['new_inside_vertices'] > 0))
        self.assertEqual(chart['exposed'], sum(1 for r in records if r['exposed_vertices'] > 0))
        self.assertEqual(chart['legend_inside'], f'new inside (max {max(r["new_inside_vertices"] for r in records)}) ▲')
        self.assertEqual(chart['legend_exposed'], f'hidden skin out (max {max(r["exposed_vertices"] for r in records)}) ▼')
        # Laid out as wide as its panel (next to the table it was squeezed to a sliver).
        self.assertGreater(chart['width'], 0.8, 'the chart takes its panel\'s width')

    def test_3_file_picker_and_drop_open_clips(self):
        chrome = type(self).chrome
        self.assertIsNotNone(chrome, 'test_2 starts the browser')
        url = chrome.eval('location.origin') + '/index.html'
        chrome.call('Page.navigate', url=url)
        chrome.wait_for('document.body.dataset.state === "empty" && window.sinewViewer', 'an empty viewer')
        # The file picker of slot A.
        root = chrome.call('DOM.getDocument')['root']['nodeId']
        node = chrome.call('DOM.querySelector', nodeId=root, selector='#file-a')['nodeId']
        chrome.call('DOM.setFileInputFiles', nodeId=node, files=[self.glbs[1]])
        chrome.wait_for('document.body.dataset.state === "ready"', 'the picked clip loaded')
        slots = chrome.eval('sinewViewer.state().slots')
        self.assertEqual(slots[0]['label'], os.path.basename(self.glbs[1]))
        self.assertIsNone(slots[1])
        # A file dropped on the right half goes to slot B.
        box = chrome.eval('(() => { const r = document.getElementById("view").getBoundingClientRect();'
                          ' return [r.left, r.top, r.width, r.height]; })()')
        x, y = box[0] + box[2] * 0.75, box[1] + box[3] / 2
        data = {'items': [], 'files': [self.glbs[0]], 'dragOperationsMask': 1}
        for kind in ('dragEnter', 'dragOver', 'drop'):
            chrome.call('Input.dispatchDragEvent', type=kind, x=x, y=y, data=data)
        chrome.wait_for('(sinewViewer.state().slots[1] || {}).label === ' + json.dumps(os.path.basename(self.glbs[0])),
                        'the dropped clip in slot B')
        chrome.wait_for('document.body.dataset.state === "ready" && document.body.dataset.frameB', 'slot B shown')

    def test_4_a_file_without_a_mesh_or_a_bad_file_does_not_stop_the_viewer(self):
        """A glTF with no mesh (a skeleton's animation) plays and the viewer goes on drawing (until
        2026-12-03 its first frame threw and no frame was drawn again); a file that fails to load
        shows an error, and the next good one clears it (until then the state stayed "loading")."""
        chrome = type(self).chrome
        self.assertIsNotNone(chrome, 'test_2 starts the browser')
        times, moves = [0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
        data = b''.join(struct.pack('<f', x) for x in times + moves)
        meshless = {
            'asset': {'version': '2.0'}, 'scene': 0, 'scenes': [{'nodes': [0]}], 'nodes': [{'name': 'bone'}],
            'buffers': [{'byteLength': len(data),
                         'uri': 'data:application/octet-stream;base64,' + base64.b64encode(data).decode()}],
            'bufferViews': [{'buffer': 0, 'byteOffset': 0, 'byteLength': 8},
                            {'buffer': 0, 'byteOffset': 8, 'byteLength': 24}],
            'accessors': [{'bufferView': 0, 'componentType': 5126, 'count': 2, 'type': 'SCALAR', 'min': [0], 'max': [1]},
                          {'bufferView': 1, 'componentType': 5126, 'count': 2, 'type': 'VEC3'}],
            'animations': [{'samplers': [{'input': 0, 'output': 1}],
                            'channels': [{'sampler': 0, 'target': {'node': 0, 'path': 'translation'}}]}],
        }
        paths = {'meshless': os.path.join(self.tmp, 'skeleton-only.gltf'), 'bad': os.path.join(self.tmp, 'broken.glb')}
        with open(paths['meshless'], 'w') as f:
            json.dump(meshless, f)
        with open(paths['bad'], 'wb') as f:
            f.write(b'glTF' + b'\x00' * 40)
        url = chrome.eval('location.origin') + '/index.html'
        chrome.call('Page.navigate', url=url)
        chrome.wait_for('document.body.dataset.state === "empty" && window.sinewViewer', 'an empty viewer')
        root = chrome.call('DOM.getDocument')['root']['nodeId']
        picker = chrome.call('DOM.querySelector', nodeId=root, selector='#file-a')['nodeId']

        def pick(path):
            chrome.call('DOM.setFileInputFiles', nodeId=picker, files=[path])

        pick(paths['meshless'])
        chrome.wait_for('document.body.dataset.state === "ready"', 'the skeleton-only file loaded')
        # Its frames are its animation's keys (two), not a morph target count it does not have.
        self.assertEqual(chrome.eval('sinewViewer.state().slots[0].frames'), 2)
        drawn = int(chrome.eval('sinewViewer.state().renders'))
        chrome.wait_for(f'sinewViewer.state().renders > {drawn + 5}', 'frames drawn after a file without a mesh')
        self.assertEqual(chrome.eval('document.body.dataset.state'), 'ready')
        # A primitive without positions beside a clip of one still point: the point is looked at
        # from a finite distance and drawing goes on (until 2026-12-07 the first threw on every
        # frame, so nothing was drawn again, and the second left near = far = 0, a blank view).
        point = struct.pack('<3f', 0.5, 0.25, 2.0)
        odd = {
            'asset': {'version': '2.0'}, 'scene': 0, 'scenes': [{'nodes': [0]}], 'nodes': [{'mesh': 0}],
            'meshes': [{'primitives': [{'attributes': {'NORMAL': 1}, 'mode': 0},
                                       {'attributes': {'POSITION': 0}, 'mode': 0}]}],
            'buffers': [{'byteLength': 24,
                         'uri': 'data:application/octet-stream;base64,' + base64.b64encode(point * 2).decode()}],
            'bufferViews': [{'buffer': 0, 'byteOffset': 0, 'byteLength': 12}, {'buffer': 0, 'byteOffset': 12, 'byteLength': 12}],
            'accessors': [{'bufferView': 0, 'componentType': 5126, 'count': 1, 'type': 'VEC3',
                           'min': [0.5, 0.25, 2.0], 'max': [0.5, 0.25, 2.0]},
                          {'bufferView': 1, 'componentType': 5126, 'count': 1, 'type': 'VEC3'}],
        }
        paths['odd'] = os.path.join(self.tmp, 'one-point.gltf')
        with open(paths['odd'], 'w') as f:
            json.dump(odd, f)
        pick(paths['odd'])
        chrome.wait_for('document.body.dataset.state === "ready" && sinewViewer.state().slots[0].label === "one-point.gltf"',
                        'the one-point file loaded')
        drawn = int(chrome.eval('sinewViewer.state().renders'))
        chrome.wait_for(f'sinewViewer.state().renders > {drawn + 5}', 'frames drawn after a primitive without positions')
        near, far = chrome.eval('sinewViewer.state().near'), chrome.eval('sinewViewer.state().far')
        self.assertTrue(0 < near < far, (near, far))
        self.assertEqual(chrome.eval('document.body.dataset.state'), 'ready')
        self.assertFalse(chrome.eval('document.body.dataset.error'))
        pick(paths['bad'])
        end = time.monotonic() + DEADLINE
        while chrome.eval('document.body.dataset.state') != 'error' and time.monotonic() < end:
            time.sleep(0.05)
        self.assertEqual(chrome.eval('document.body.dataset.state'), 'error')
        self.assertIn('broken.glb', chrome.eval('document.body.dataset.error'))
        pick(self.glbs[0])
        chrome.wait_for('document.body.dataset.state === "ready" && !document.body.dataset.error',
                        'a good clip after a bad one')
        self.assertEqual(chrome.eval('sinewViewer.state().slots[0].label'), os.path.basename(self.glbs[0]))
        # A file past the viewer's size budget (?max_mb, here a tenth of the clip) is refused
        # before it is read, saying why, picked or by URL (until 2026-12-07 any size was read: a
        # large bake took the tab down without a word).
        tenth = os.path.getsize(self.glbs[0]) / 2 ** 20 / 10
        chrome.call('Page.navigate', url=f'{url}?max_mb={tenth}')
        chrome.wait_for('document.body.dataset.state === "empty" && window.sinewViewer', 'an empty viewer, small budget')
        root = chrome.call('DOM.getDocument')['root']['nodeId']
        picker = chrome.call('DOM.querySelector', nodeId=root, selector='#file-a')['nodeId']
        def refused(label):  # polls for the size refusal of `label` (wait_for fails on any error)
            end = time.monotonic() + DEADLINE
            got = ''
            while time.monotonic() < end:
                got = chrome.eval('(document.body && document.body.dataset.error) || ""') or ''
                if label in got:
                    break
                time.sleep(0.05)
            self.assertIn(label, got)
            self.assertIn('more than this viewer opens', got)
            self.assertEqual(chrome.eval('document.body.dataset.state'), 'error')

        pick(self.glbs[0])
        refused(os.path.basename(self.glbs[0]))
        self.assertFalse(chrome.eval('sinewViewer.state().slots[0]'))
        clip = urllib.parse.quote(f'/clips/0/{urllib.parse.quote(os.path.basename(self.glbs[0]))}', safe='/')
        chrome.call('Page.navigate', url=f'{url}?max_mb={tenth}&a={clip}')
        refused('/clips/0/')  # the page opened by URL (the picked file's page said no such label)

    def test_5_a_lost_webgl_context_is_shown_and_drawing_resumes_when_it_is_back(self):
        """The browser may take the WebGL context away (GPU reset, memory): the viewer says so
        instead of showing a blank view as "ready" (as until 2026-12-03), and draws the clip again
        once the context is restored."""
        chrome = type(self).chrome
        self.assertIsNotNone(chrome, 'test_2 starts the browser')
        clip = urllib.parse.quote(f'/clips/0/{urllib.parse.quote(os.path.basename(self.glbs[0]))}', safe='/')
        chrome.call('Page.navigate', url=chrome.eval('location.origin') + f'/index.html?a={clip}&frame=30')
        chrome.wait_for('document.body.dataset.state === "ready" && document.body.dataset.frameA === "30"', 'frame 30 shown')
        lose = 'document.getElementById("view").getContext("webgl2").getExtension("WEBGL_lose_context")'
        chrome.eval(f'window.loseExt = {lose}; window.loseExt.loseContext(); true')
        end = time.monotonic() + DEADLINE
        while chrome.eval('document.body.dataset.state') != 'lost' and time.monotonic() < end:
            time.sleep(0.05)
        self.assertEqual(chrome.eval('document.body.dataset.state'), 'lost')
        self.assertIn('WebGL context', chrome.eval('document.getElementById("status").textContent'))
        chrome.eval('window.loseExt.restoreContext(); true')
        renders = int(chrome.wait_for('document.body.dataset.state === "ready" && document.body.dataset.renders',
                                      'the context back'))
        chrome.wait_for(f'Number(document.body.dataset.renders) >= {renders + 2}', 'two more frames drawn')
        box = chrome.eval('(() => { const r = document.getElementById("view").getBoundingClientRect();'
                          ' return [r.left, r.top, r.right, r.bottom].map((x) => Math.round(x * devicePixelRatio)); })()')
        png = chrome.screenshot()
        with open(os.path.join(self.tmp, 'viewer-context-restored.png'), 'wb') as f:
            f.write(png)
        img = Image.open(io.BytesIO(png)).convert('RGB')
        frac = drawn_fraction(img, tuple(box))
        print(f'after the context came back: {100 * frac:.1f} % of pixels drawn')
        self.assertGreater(frac, 0.01, 'the mesh is not drawn again after the context came back')
        self.assertLess(frac, 0.6)


    def test_6_a_point_set_bake_in_slot_b_alone_is_drawn_with_its_panel(self):
        """A point set's bake (no triangles, no normals: three's Points) is looked at and drawn,
        and a clip in slot B alone shows its panel (until 2026-12-07 the camera stayed at the
        origin with nothing drawn, and B's panel was hidden whenever fewer than two clips played)."""
        chrome = type(self).chrome
        self.assertIsNotNone(chrome, 'test_2 starts the browser')
        points = os.path.join(self.tmp, 'bcn-points.glb')
        r = subprocess.run([ARGS.cli, '--target', self.target, 'batch', CHARACTER, '--point-set', '400', '--method', 'lbs',
                            '--clip-fps', '10', '--gltf', points], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        chrome.call('Page.navigate', url=chrome.eval('location.origin') + '/index.html')
        chrome.wait_for('document.body.dataset.state === "empty" && window.sinewViewer', 'an empty viewer')
        root = chrome.call('DOM.getDocument')['root']['nodeId']
        picker = chrome.call('DOM.querySelector', nodeId=root, selector='#file-b')['nodeId']
        chrome.call('DOM.setFileInputFiles', nodeId=picker, files=[points])
        chrome.wait_for('document.body.dataset.state === "ready" && (sinewViewer.state().slots[1] || {}).frames > 1',
                        'the point set in slot B')
        camera = chrome.eval('sinewViewer.state().camera')
        self.assertGreater(sum(abs(c) for c in camera), 0, 'the camera was not placed to look at the points')
        self.assertNotEqual(chrome.eval('getComputedStyle(document.getElementById("panel-b")).display'), 'none',
                            "slot B's panel is hidden while it plays alone")
        renders = int(chrome.eval('sinewViewer.state().renders'))
        chrome.wait_for(f'sinewViewer.state().renders >= {renders + 2}', 'two more frames drawn')
        box = chrome.eval('(() => { const r = document.getElementById("view").getBoundingClientRect();'
                          ' return [r.left, r.top, r.right, r.bottom].map((x) => Math.round(x * devicePixelRatio)); })()')
        img = Image.open(io.BytesIO(chrome.screenshot())).convert('RGB')
        frac = drawn_fraction(img, tuple(box))
        print(f'the point set: {100 * frac:.2f} % of pixels drawn')
        self.assertGreater(frac, 0.0005, 'no point of the set is drawn')

    def test_7_a_long_clips_chart_shows_every_frames_worst_without_overlap(self):
        """Past the chart's 400 columns each column is the worst of its frames (until 2026-12-07 a
        long clip's bars were drawn over each other and a fold could hide behind its neighbour);
        up to 400 frames a column is a frame."""
        chrome = type(self).chrome
        self.assertIsNotNone(chrome, 'test_2 starts the browser')
        for n in (7, 400, 401, 1000, 100003):
            values = [(k * 7919) % 101 for k in range(n)]
            got = chrome.eval(f'sinewViewer.chartColumns(Array.from({{length: {n}}}, (_, k) => (k * 7919) % 101), '
                              f'Math.min({n}, 400))')
            columns = min(n, 400)
            self.assertEqual(len(got), columns, f'{n} frames')
            want = [max(values[c * n // columns:(c + 1) * n // columns]) for c in range(columns)]
            self.assertEqual(got, want, f'{n} frames: a column is the worst of its frames')
        # Each frame in exactly one column: a lone fold anywhere in a long clip shows.
        for k in (0, 1, 499, 998, 999):
            got = chrome.eval(f'sinewViewer.chartColumns(Array.from({{length: 1000}}, (_, i) => i === {k} ? 5 : 0), 400)')
            self.assertEqual(sum(1 for v in got if v == 5), 1, f'the fold at frame {k} of 1000')

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--server', required=True)
    ap.add_argument('--cli', required=True)
    ap.add_argument('--out', default='')
    ap.add_argument('--methods', default='lbs,dqs')
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0], '-v', *rest])
