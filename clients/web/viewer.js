// Sinew's clip viewer (see index.html). Each slot (A, B) holds one glTF: its scene, an
// AnimationMixer playing its first animation (for `sinew batch --gltf` files: the STEP weights
// animation, one morph target per baked frame), and `scenes[0].extras.sinew` when present (method,
// clip, frames per second, per-frame quality). Both slots share one clock (clip time) and one
// camera: frame k of A is shown beside frame k of B, from the same view, when their frame rates
// and lengths agree (two bakes of one clip); otherwise each shows its frame at the clock's time,
// looping over its own length, and the slider and seek count A's frames.
//
// State for tests and scripts, on <body>: data-state (empty, loading, ready, error, or lost: the
// browser took the WebGL context away and has not given it back yet), data-error,
// data-frame-a / data-frame-b (the frame each slot shows: the morph target weighted 1, or the
// clock's frame for other animations) and data-renders (frames drawn). window.sinewViewer has
// load(slot, url), seek(frame), play(), pause() and state(). ?a=URL&b=URL open clips, &frame=K
// seeks, &max_mb=N sets the largest file opened (1024 MiB).
import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';

const canvas = document.getElementById('view');
const renderer = new THREE.WebGLRenderer({ canvas, antialias: true, preserveDrawingBuffer: true });
renderer.setPixelRatio(window.devicePixelRatio);
// What three.js forgets when it rebuilds its state on a restored WebGL context (set again then).
function setUpRenderer() {
  renderer.setClearColor(0x1d2026);
  renderer.setScissorTest(true);
}
setUpRenderer();
const camera = new THREE.PerspectiveCamera(35, 1, 0.01, 1000);
const loader = new GLTFLoader();
const colors = [0xc9b59a, 0x9ab8c9];
const names = ['a', 'b'];
const slots = [null, null];
let playing = true, speed = 1, clock = 0, renders = 0, fitted = false, pending = 0;
const errors = [null, null];     // each slot's last load's error (a later load of the slot clears it)
const generation = [0, 0];       // each slot's latest load: an older one finishing later is dropped
let lastTick = performance.now();
let contextLost = false;         // between webglcontextlost and webglcontextrestored

const $ = (id) => document.getElementById(id);
const body = document.body;
// The largest file a slot opens, MiB (?max_mb=N changes it): a tab holds about five times a bake
// while it draws it (the parsed buffers, three.js's morph-target texture, the bounds pass); a
// 276 MB bake took 2.4 GB. Until 2026-12-07 any size was read, and a bake near the exporter's
// 4 GiB cap took the tab down without a word.
const maxMiB = Number(new URLSearchParams(location.search).get('max_mb')) > 0
  ? Number(new URLSearchParams(location.search).get('max_mb')) : 1024;

// A file's size in bytes before it is read: a picked file's own, else the server's Content-Length
// (HEAD); null where it does not say.
async function sizeOf(url, known) {
  if (known !== undefined) return known;
  try {
    const r = await fetch(url, { method: 'HEAD' });
    const n = Number(r.headers.get('content-length'));
    return r.ok && n > 0 ? n : null;
  } catch (e) {
    return null;
  }
}

function setStatus(text, state) {
  $('status').textContent = text;
  if (state) body.dataset.state = state;
}

// A slot's scene: the glTF's, lit by a light that follows the camera.
function makeScene(gltf, color) {
  const scene = new THREE.Scene();
  const sky = new THREE.HemisphereLight(0xffffff, 0x404048, 1.0);
  const key = new THREE.DirectionalLight(0xffffff, 1.6);  // from the camera (placed each frame)
  scene.add(sky, key, key.target);
  scene.userData.lights = { sky, key };
  const root = gltf.scene;
  root.traverse((o) => {
    if (o.isPoints) {  // a point set's bake (sinew batch --point-set N --gltf): no triangles, no normals
      o.material = new THREE.PointsMaterial({ color, size: 3, sizeAttenuation: false });
      o.frustumCulled = false;
      return;
    }
    if (!o.isMesh) return;
    // Flat shading takes each triangle's normal from its morphed positions, so every frame is
    // lit as deformed (the file's normals are the rest pose's).
    o.material = new THREE.MeshStandardMaterial({ color, roughness: 0.75, metalness: 0, flatShading: true,
                                                  side: THREE.DoubleSide });
    o.frustumCulled = false;
  });
  scene.add(root);
  return scene;
}

function sinewInfo(gltf) {
  const ud = gltf.scene.userData || {};
  return ud.sinew || (gltf.scenes && gltf.scenes[0] && gltf.scenes[0].userData && gltf.scenes[0].userData.sinew) || null;
}

function morphMesh(root) {
  let found = null;
  // Meshes and point sets alike (until 2026-12-07 a point set's bake was not played, nor looked at).
  root.traverse((o) => { if (!found && (o.isMesh || o.isPoints) && o.morphTargetInfluences && o.morphTargetInfluences.length) found = o; });
  return found;
}

// Frees what a slot's clip holds on the GPU (geometry, materials, textures) and its mixer.
function dispose(s) {
  if (!s) return;
  if (s.mixer) {
    s.mixer.stopAllAction();
    s.mixer.uncacheRoot(s.gltf.scene);
  }
  s.scene.traverse((o) => {
    if (o.geometry) o.geometry.dispose();
    for (const m of [].concat(o.material || [])) {
      for (const v of Object.values(m)) if (v && v.isTexture) v.dispose();
      m.dispose();
    }
  });
}

// The status line and data-state from every slot: an error while any slot's last load failed,
// loading while a load runs, else ready. (Until 2026-12-03 one failed load left the state
// "loading" or "error" for good, whatever loaded after it.)
function showStatus() {
  if (contextLost) {
    return setStatus('the browser took the WebGL context away (a GPU reset, or too many pages drawing 3D); ' +
                     'drawing resumes when it gives it back', 'lost');
  }
  const failed = errors.map((e, i) => e && `${names[i].toUpperCase()}: ${e}`).filter(Boolean);
  if (failed.length) {
    body.dataset.error = failed.join('; ');
    return setStatus(`could not open ${failed.join('; ')}`, 'error');
  }
  delete body.dataset.error;
  const live = slots.filter(Boolean);
  if (pending > 0) return setStatus('loading', 'loading');
  setStatus(live.map((x) => `${x.label}: ${x.frames} frames at ${x.fps} frames/s`).join(' | ') || 'no clip',
            live.length ? 'ready' : 'empty');
}

async function load(slot, url, label, knownSize) {
  ++pending;
  const gen = ++generation[slot];
  setStatus(`loading ${label || url}`, 'loading');
  try {
    const size = await sizeOf(url, knownSize);
    if (size !== null && size > maxMiB * 2 ** 20) {
      throw new Error(`${(size / 2 ** 20).toFixed(0)} MiB is more than this viewer opens (${maxMiB} MiB; ` +
                      '?max_mb=N changes it): a browser tab holds about five times a bake while drawing it; ' +
                      'bake fewer frames or a lighter mesh');
    }
    if (gen !== generation[slot]) return;
    const gltf = await loader.loadAsync(url);
    if (gen !== generation[slot]) return;  // a later load of this slot was asked for meanwhile
    const info = sinewInfo(gltf);
    const mesh = morphMesh(gltf.scene);
    const clip = gltf.animations[0] || null;
    // Frames: a Sinew bake's own count; else its animation's key times (until 2026-12-03 its
    // morph targets' count, 1 for a skeletal animation: the slider could not seek it).
    const keys = clip ? new Set(clip.tracks.flatMap((t) => Array.from(t.times))).size : 0;
    const frames = info ? info.frames : Math.max(1, keys || (mesh ? mesh.morphTargetInfluences.length : 1));
    const fps = info ? info.frames_per_second : clip && frames > 1 && clip.duration > 0 ? (frames - 1) / clip.duration : 30;
    const s = { label: label || url.split('/').pop(), gltf, info, mesh, frames, fps,
                scene: makeScene(gltf, colors[slot]), mixer: null, duration: frames / fps };
    if (clip) {
      // A baked clip's last frame shows for 1/fps like the others: the clip lasts frames/fps.
      clip.duration = Math.max(clip.duration, s.duration);
      s.duration = clip.duration;
      s.mixer = new THREE.AnimationMixer(gltf.scene);
      s.mixer.clipAction(clip).play();
    }
    dispose(slots[slot]);  // the clip it replaces (until 2026-12-03 never freed)
    slots[slot] = s;
    errors[slot] = null;
    fitted = false;
    panel(slot);
    const maxFrames = Math.max(...slots.filter(Boolean).map((x) => x.frames));
    $('scrub').max = String(maxFrames - 1);
  } catch (e) {
    // A .gltf whose buffers or textures are files beside it cannot be read from a picked or
    // dropped file (one with its data embedded can): the loader's own error does not say so.
    const hint = /\.gltf$/i.test(label || url) ? ' (a .gltf whose data lies in files beside it cannot be opened here: use a .glb, which holds it all)' : '';
    if (gen === generation[slot]) errors[slot] = `${label || url}: ${String(e && e.message || e)}${hint}`;
  } finally {
    --pending;
    showStatus();
  }
}

// The frame a slot shows: the morph target weighted 1 (baked clips), or the clock's frame.
function shownFrame(s) {
  if (s.mesh && s.info) {
    const w = s.mesh.morphTargetInfluences;
    let best = 0;
    for (let i = 1; i < w.length; ++i) if (w[i] > w[best]) best = i;
    return best;
  }
  return Math.min(s.frames - 1, Math.floor((clock % s.duration) * s.fps + 1e-6));
}

function fmt(x, digits = 3) { return typeof x === 'number' ? x.toFixed(digits) : '–'; }

// A chart's columns over a clip's per-frame counts: column c the largest count of the frames it
// covers, frames [floor(c n / columns), floor((c + 1) n / columns)); one frame a column when
// columns = n.
function chartColumns(values, columns) {
  const n = values.length, out = new Array(columns).fill(0);
  for (let c = 0; c < columns; ++c) {
    for (let k = Math.floor(c * n / columns); k < Math.floor((c + 1) * n / columns); ++k) out[c] = Math.max(out[c], values[k]);
  }
  return out;
}

// The slot's panel: what was baked and, with quality reports, the shown frame's and a chart over
// the clip of the vertices the pose put inside the skin, the hidden skin it brought out, and the
// volume.
function panel(slot) {
  const s = slots[slot], el = $(`panel-${names[slot]}`);
  el.textContent = '';
  if (!s) return;
  const h = document.createElement('h2');
  h.textContent = `${names[slot].toUpperCase()}: ${s.info ? s.info.method : s.label}`;
  el.appendChild(h);
  const sub = document.createElement('div');
  sub.className = 'dim';
  sub.textContent = s.info ? `${s.info.source}, clip "${s.info.clip}": ${s.info.frames} frames at ${s.info.frames_per_second} frames/s, ${s.info.vertices} vertices`
                           : `${s.label}: ${s.frames} frames`;
  el.appendChild(sub);
  const q = s.info && s.info.quality;
  if (!q) return;
  const table = document.createElement('table');
  table.innerHTML = '<tr><td>frame</td><td class="v-frame"></td></tr><tr><td>inside the skin</td><td class="v-inside"></td></tr>' +
                    '<tr><td>of them not at rest</td><td class="v-new"></td></tr>' +
                    '<tr><td>hidden skin brought out</td><td class="v-exposed"></td></tr>' +
                    '<tr><td>touching</td><td class="v-touch"></td></tr><tr><td>deepest</td><td class="v-depth"></td></tr>' +
                    '<tr><td>volume / rest</td><td class="v-volume"></td></tr><tr><td>edge stretch</td><td class="v-stretch"></td></tr>';
  el.appendChild(table);
  // Chart, a cursor at the shown frame: bars up from the bottom, the vertices the pose put inside
  // the skin (those inside at rest left out; files from before 2026-11-27 count every inside
  // vertex); bars down from the top, the hidden skin the pose brought out (files from before
  // 2026-12-06 lack it: none drawn); a line, the volume ratio.
  const W = 400, H = 60, n = q.length, ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', '100%'); svg.setAttribute('height', H); svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  const fresh = q.every((f) => f.new_inside_vertices !== undefined);
  const inside = q.map((f) => (fresh ? f.new_inside_vertices : f.inside_vertices));
  const exposed = q.map((f) => f.exposed_vertices);
  const hasExposed = exposed.every((e) => e !== undefined);
  const most = (xs) => xs.reduce((m, x) => Math.max(m, x), 0);  // no spread: a long clip's array
  const maxInside = most(inside), maxExposed = hasExposed ? most(exposed) : 0;
  const scale = Math.max(1, maxInside, maxExposed);  // one scale: the two bars compare
  const vols = q.map((f) => f.volume_ratio);
  const vlo = vols.reduce((m, v) => Math.min(m, v), Infinity), vhi = vols.reduce((m, v) => Math.max(m, v), -Infinity);
  // A bar a column: a frame each up to W frames; past that each column shows the worst of its
  // frames (until 2026-12-07 a longer clip's bars were drawn over each other, a frame's bar
  // hiding its neighbours').
  const columns = Math.min(n, W), barsIn = chartColumns(inside, columns);
  const barsOut = hasExposed ? chartColumns(exposed, columns) : [];
  let bars = '', out = '', line = '';
  for (let c = 0; c < columns; ++c) {
    const x = (c + 0.5) * W / columns;
    if (barsIn[c] > 0) bars += `M${x.toFixed(1)} ${H}V${(H - (H / 2 - 2) * barsIn[c] / scale).toFixed(1)}`;
    if (hasExposed && barsOut[c] > 0) out += `M${x.toFixed(1)} 0V${((H / 2 - 2) * barsOut[c] / scale).toFixed(1)}`;
  }
  q.forEach((f, k) => {
    const x = (k + 0.5) * W / n;
    const y = vhi > vlo ? 4 + (H - 8) * (vhi - f.volume_ratio) / (vhi - vlo) : H / 2;
    line += `${k ? 'L' : 'M'}${x.toFixed(1)} ${y.toFixed(1)}`;
  });
  const width = Math.max(1, W / columns - 1).toFixed(1);
  svg.innerHTML = `<rect width="${W}" height="${H}" fill="#262a31"/>` +
    `<path class="chart-inside" d="${bars}" stroke="#e77" stroke-width="${width}"/>` +
    `<path class="chart-exposed" d="${out}" stroke="#eb5" stroke-width="${width}"/>` +
    `<path d="${line}" fill="none" stroke="#7bf" stroke-width="1.5"/>` +
    `<line class="cursor" y1="0" y2="${H}" stroke="#fff" stroke-width="1"/>`;
  el.appendChild(svg);
  // The legend under the chart, as text (the chart stretches to the panel's width).
  const legend = document.createElement('div');
  legend.className = 'legend';
  const entries = [['legend-inside', `${fresh ? 'new inside' : 'inside'} (max ${maxInside}) ▲`]];
  if (hasExposed) entries.push(['legend-exposed', `hidden skin out (max ${maxExposed}) ▼`]);
  entries.push(['legend-volume', `volume ${fmt(vlo)}…${fmt(vhi)}`]);
  for (const [cls, text] of entries) {
    const span = document.createElement('span');
    span.className = cls;
    span.textContent = text;
    legend.appendChild(span);
  }
  el.appendChild(legend);
}

function updatePanel(slot, frame) {
  const s = slots[slot], el = $(`panel-${names[slot]}`);
  const q = s && s.info && s.info.quality && s.info.quality[frame];
  if (!q) return;
  el.querySelector('.v-frame').textContent = String(frame);
  const inside = el.querySelector('.v-inside');
  inside.textContent = String(q.inside_vertices);
  inside.className = q.inside_vertices > 0 ? 'v-inside bad' : 'v-inside';
  // Files written before the rest-inside count (2026-11-27) lack it: shown as unknown. Where the
  // deepest of them is (its vertex and joint) since 2026-12-06.
  const fresh = el.querySelector('.v-new');
  const where = q.new_deepest_vertex === undefined ? ''
              : `; deepest at vertex ${q.new_deepest_vertex}${q.new_deepest_joint ? ` (${q.new_deepest_joint})` : ''}`;
  fresh.textContent = q.new_inside_vertices === undefined ? '?'
                    : `${q.new_inside_vertices} (${q.rest_inside_vertices} inside at rest)${where}`;
  fresh.className = q.new_inside_vertices > 0 ? 'v-new bad' : 'v-new';
  // Skin inside (or touching) the rest skin that this pose brought out, e.g. a body through its
  // clothes; files written before 2026-12-06 (fifty-ninth session) lack it.
  const exposed = el.querySelector('.v-exposed');
  exposed.textContent = q.exposed_vertices === undefined ? '?' : String(q.exposed_vertices);
  exposed.className = q.exposed_vertices > 0 ? 'v-exposed bad' : 'v-exposed';
  el.querySelector('.v-touch').textContent = String(q.touching_vertices);
  el.querySelector('.v-depth').textContent = fmt(q.max_depth, 4);
  el.querySelector('.v-volume').textContent = fmt(q.volume_ratio, 4);
  el.querySelector('.v-stretch').textContent = `×${fmt(q.edge_stretch_min)} … ×${fmt(q.edge_stretch_max)}`;
  const x = (frame + 0.5) * 400 / s.info.quality.length;
  const c = el.querySelector('.cursor');
  c.setAttribute('x1', x); c.setAttribute('x2', x);
}

// One camera for both views, fitted to the loaded clips' bounds over all their frames, looking
// along the rest meshes' thinnest axis with their longest axis up (a standing character, whichever
// way its file points up, is seen from the front or the back); orbit from there with the mouse.
let controls = new OrbitControls(camera, canvas);
function fit() {
  const rest = new THREE.Box3(), all = new THREE.Box3();
  for (const s of slots) {
    if (!s) continue;
    s.gltf.scene.updateMatrixWorld(true);
    s.gltf.scene.traverse((o) => {
      if (!o.isMesh && !o.isPoints) return;
      const g = o.geometry;
      // A primitive without positions (glTF allows one; three draws nothing of it) has no box:
      // until 2026-12-07 it threw here on every frame, and neither slot was drawn.
      if (!g.attributes.position) return;
      const box = new THREE.Box3().setFromBufferAttribute(g.attributes.position);
      const frames = box.clone();
      // Every frame's vertices (three's computeBoundingBox adds relative targets' bounds up).
      const p = g.attributes.position, v = new THREE.Vector3();
      for (const m of g.morphAttributes.position || []) {
        for (let i = 0; i < m.count; ++i) {
          v.fromBufferAttribute(m, i);
          if (g.morphTargetsRelative) v.x += p.getX(i), v.y += p.getY(i), v.z += p.getZ(i);
          frames.expandByPoint(v);
        }
      }
      rest.union(box.applyMatrix4(o.matrixWorld));
      all.union(frames.applyMatrix4(o.matrixWorld));
    });
  }
  if (all.isEmpty()) {  // no mesh to look at (a skeleton-only file): the camera stays
    fitted = true;
    return;
  }
  const center = all.getCenter(new THREE.Vector3()), size = all.getSize(new THREE.Vector3());
  const extent = rest.getSize(new THREE.Vector3()).toArray();
  const order = [0, 1, 2].sort((i, j) => extent[i] - extent[j]);  // thinnest … longest
  const axis = (i) => new THREE.Vector3().setComponent(i, 1);
  // Far enough to see the whole box in one view (half the canvas with two clips).
  const tan = Math.tan(THREE.MathUtils.degToRad(camera.fov / 2));
  const views = slots.filter(Boolean).length;
  const aspect = canvas.clientWidth / views / Math.max(1, canvas.clientHeight);
  const s3 = size.toArray(), wide = Math.max(s3[order[1]], s3[order[0]]);
  // A box of no size (a clip of one still point) is looked at from a unit away: until 2026-12-07
  // near and far were both 0 and nothing was drawn, with the status saying ready.
  const fitting = s3[order[0]] / 2 + 1.08 * Math.max(s3[order[2]] / 2 / tan, wide / 2 / (tan * aspect));
  const dist = fitting > 0 ? fitting : 1;
  camera.up.copy(axis(order[2]));
  camera.position.copy(center).addScaledVector(axis(order[0]), dist);
  camera.near = dist / 100; camera.far = dist * 10;
  camera.lookAt(center);
  controls.dispose();
  controls = new OrbitControls(camera, canvas);  // takes camera.up when made
  controls.target.copy(center);
  controls.update();
  fitted = true;
}

function resize() {
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.floor(w * renderer.getPixelRatio()) || canvas.height !== Math.floor(h * renderer.getPixelRatio())) {
    renderer.setSize(w, h, false);
  }
}

// One frame drawn; the next is always asked for, so that one bad frame (an exception drawing a
// file this viewer did not expect) shows in the status line instead of stopping the viewer.
function tick(now) {
  try {
    draw(now);
  } catch (e) {
    body.dataset.error = String(e && e.message || e);
    setStatus(`could not draw: ${body.dataset.error}`, 'error');
  }
  requestAnimationFrame(tick);
}

function draw(now) {
  const dt = Math.min(0.1, (now - lastTick) / 1000);
  lastTick = now;
  if (playing) clock += dt * speed;
  if (contextLost) return;  // nothing can be drawn (three.js skips render()); not counted in renders
  resize();
  const live = slots.filter(Boolean);
  body.classList.toggle('single', live.length < 2);
  if (live.length && !fitted) fit();
  const w = canvas.clientWidth, h = canvas.clientHeight;
  const views = live.length === 2 ? [[0, 0, w / 2, h], [w / 2, 0, w / 2, h]] : [[0, 0, w, h]];
  renderer.setScissor(0, 0, w, h);
  renderer.setViewport(0, 0, w, h);
  renderer.clear();
  let vi = 0, first = -1;
  slots.forEach((s, slot) => {
    if (!s) return;
    if (s.mixer) s.mixer.setTime(clock % s.duration);
    const { sky, key } = s.scene.userData.lights;
    sky.position.copy(camera.up);
    key.position.copy(camera.position).addScaledVector(camera.up, camera.position.distanceTo(controls.target) * 0.5);
    key.target.position.copy(controls.target);
    const [x, y, vw, vh] = views[vi++];
    camera.aspect = vw / vh;
    camera.updateProjectionMatrix();
    renderer.setViewport(x, y, vw, vh);
    renderer.setScissor(x, y, vw, vh);
    renderer.render(s.scene, camera);
    const frame = shownFrame(s);
    body.dataset[`frame${names[slot].toUpperCase()}`] = String(frame);
    if (first < 0) first = frame;
    updatePanel(slot, frame);
  });
  if (first >= 0) {
    $('clock').textContent = `frame ${first}`;
    if (playing) $('scrub').value = String(first);
    document.title = `sinew viewer: frame ${first}`;
  }
  body.dataset.renders = String(++renders);
}

function seek(frame) {
  if (!Number.isFinite(frame)) return;  // ?frame=abc: until 2026-12-07 the clock became NaN
  playing = false;
  $('play').textContent = 'play';
  const fps = (slots.find(Boolean) || { fps: 30 }).fps;
  clock = (frame + 0.5) / fps;  // the middle of the frame's interval
  $('scrub').value = String(frame);
}

function openFiles(files, slot) {
  [...files].slice(0, 2).forEach((f, i) => {
    const url = URL.createObjectURL(f);
    load(files.length > 1 ? i : slot, url, f.name, f.size).finally(() => URL.revokeObjectURL(url));
  });
}

// A lost context (GPU reset, the browser reclaiming memory) used to leave a blank view with a
// "ready" status; three.js keeps the scenes and uploads them again once the context is back, but
// not the clear colour or the scissor test (the view came back black).
canvas.addEventListener('webglcontextlost', () => { contextLost = true; showStatus(); });
canvas.addEventListener('webglcontextrestored', () => {
  contextLost = false;
  setUpRenderer();
  showStatus();
});

$('file-a').addEventListener('change', (e) => openFiles(e.target.files, 0));
$('file-b').addEventListener('change', (e) => openFiles(e.target.files, 1));
$('play').addEventListener('click', () => {
  playing = !playing;
  $('play').textContent = playing ? 'pause' : 'play';
});
$('scrub').addEventListener('input', (e) => seek(Number(e.target.value)));
$('speed').addEventListener('change', (e) => { speed = Number(e.target.value); });
const stage = $('stage');
stage.addEventListener('dragover', (e) => { e.preventDefault(); body.classList.add('drag'); });
stage.addEventListener('dragleave', () => body.classList.remove('drag'));
stage.addEventListener('drop', (e) => {
  e.preventDefault();
  body.classList.remove('drag');
  // Dropped on the right half: slot B; on the left: A.
  const slot = slots[0] && e.clientX > stage.clientWidth / 2 ? 1 : 0;
  openFiles(e.dataTransfer.files, slot);
});

window.sinewViewer = {
  load: (slot, url) => load(slot, url),
  seek,
  chartColumns,                   // for tests: the chart's binning
  play: () => { playing = true; $('play').textContent = 'pause'; },
  pause: () => { playing = false; $('play').textContent = 'play'; },
  state: () => ({ state: body.dataset.state, renders, playing, clock, camera: camera.position.toArray(), up: camera.up.toArray(),
                  near: camera.near, far: camera.far,
                  target: controls && controls.target.toArray(),
                  slots: slots.map((s) => s && { label: s.label, frames: s.frames, fps: s.fps, frame: shownFrame(s),
                                                 method: s.info && s.info.method, quality: !!(s.info && s.info.quality) }) }),
};

const params = new URLSearchParams(location.search);
const queued = [];
if (params.get('a')) queued.push(load(0, params.get('a')));
if (params.get('b')) queued.push(load(1, params.get('b')));
if (params.get('frame') !== null) Promise.all(queued).then(() => seek(Number(params.get('frame'))));
requestAnimationFrame(tick);
