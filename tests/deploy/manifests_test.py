"""deploy/'s Kubernetes and Compose files read against the server binary they run (no Docker or
cluster needed): every server flag they pass is one `sinew-server --help` lists, and every flag
the batch Jobs pass to the `sinew` client one `sinew --help` lists; each
Deployment's memory budgets (--max-store-bytes for the rigs and --max-prepared-bytes for their
methods' preparations, counted apart, defaults from --help) leave a quarter of the pod's memory
limit for sessions; its grace period covers the preStop sleep, --drain-timeout and two seconds;
the unauthenticated metrics port stays off the client-facing Service and off the Docker host's
outside interfaces; every pod runs as the images' numeric non-root user; a batch's volume is
filled before its Job starts, and its shards wait for a server that is still starting; every
container states CPU and memory requests and a memory limit (ResourceQuota); no `grpc:` probe
checks a port that speaks TLS (the kubelet's probes speak plaintext only), and the exec probe
deploy/README.md gives for TLS passes against a TLS server (certificates made by openssl).

    /usr/bin/python3 tests/deploy/manifests_test.py SINEW_SERVER_BINARY SINEW_CLI_BINARY
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else os.path.join(ROOT, "build/server/sinew-server")
CLI = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else os.path.join(ROOT, "build/clients/sinew")


def server_help():
    out = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def flags(args):
    """{name: value or None} of the --name[=value] / --name value arguments."""
    out, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            if not eq and i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                value, i = str(args[i + 1]), i + 1
            out[name] = value if (eq or value) else None
        i += 1
    return out


def quantity(text):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(text))
    return int(m.group(1)) * {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]


def default(help_text, flag):
    m = re.search(r"--" + re.escape(flag) + r"\b.*?Default (\d+)", help_text, re.S)
    return int(m.group(1))


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.help = server_help()
        cls.known = set(re.findall(r"--([a-z0-9-]+)", cls.help))
        cls.deployments = [d for f in ("deploy/k8s/deployment.yaml", "deploy/k8s/gpu/deployment-gpu.yaml") for d in load(f)
                           if d["kind"] == "Deployment"]

    def server_containers(self):
        for d in self.deployments:
            for c in d["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "sinew-server":
                    yield d, c

    def test_every_server_flag_they_pass_is_one_the_server_has(self):
        self.assertIn("max-prepared-bytes", self.known, "the binary is older than the source: build it")
        passed = []
        for d, c in self.server_containers():
            passed.append((d["metadata"]["name"], flags(c.get("args", []))))
        for name, svc in load("deploy/compose.yaml")[0]["services"].items():
            if svc.get("image", "").startswith("sinew-server"):
                passed.append((name, flags(svc.get("command", []))))
        self.assertGreaterEqual(len(passed), 4)
        for where, given in passed:
            for flag in given:
                self.assertIn(flag, self.known, f"{where}: --{flag} is not a flag of sinew-server")

    def test_the_in_cluster_scrape_config_is_valid_and_finds_each_pods_metrics_port(self):
        """deploy/k8s/prometheus-scrape.yaml: `promtool check config` accepts it (but for its
        Kubernetes discovery, which Debian's build lacks), and its pod
        discovery's relabelling, applied here to each Deployment's pod as Kubernetes discovery
        presents it (one target per container port, annotations and labels as meta labels),
        leaves exactly one target per pod: the port named `metrics` on its annotated port and path,
        labelled with the pod's image (component)."""
        (config_map,) = load("deploy/k8s/prometheus-scrape.yaml")
        text = config_map["data"]["prometheus.yml"]
        promtool = "/usr/bin/promtool"
        if os.path.exists(promtool):
            import tempfile
            # Debian's Prometheus is built without Kubernetes discovery (promtool refuses the
            # field): the rest, relabelling included, is checked with a static target in its place.
            checked = yaml.safe_load(text)
            for job in checked["scrape_configs"]:
                self.assertIn("kubernetes_sd_configs", job)
                del job["kubernetes_sd_configs"]
                job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
            with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
                yaml.safe_dump(checked, f)
            try:
                out = subprocess.run([promtool, "check", "config", f.name], capture_output=True, text=True, timeout=60)
            finally:
                os.unlink(f.name)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        (job,) = yaml.safe_load(text)["scrape_configs"]
        (sd,) = job["kubernetes_sd_configs"]
        selector = dict(kv.split("=", 1) for s in sd["selectors"] for kv in s["label"].split(","))

        def meta(name):  # Prometheus's meta label name for a Kubernetes label or annotation
            return re.sub(r"[^a-zA-Z0-9_]", "_", name)

        def relabel(labels):  # Prometheus's keep/replace relabelling, anchored regexes
            for rule in job["relabel_configs"]:
                value = ";".join(labels.get(k, "") for k in rule["source_labels"])
                m = re.fullmatch(rule.get("regex", "(.*)"), value)
                if rule.get("action", "replace") == "keep":
                    if not m:
                        return None
                elif m:
                    labels[rule["target_label"]] = m.expand(rule.get("replacement", "$1").replace("$", "\\"))
            return labels

        for d in self.deployments:
            pod = d["spec"]["template"]
            name = d["metadata"]["name"]
            self.assertTrue(all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items()),
                            f"{name}: the discovery's selector {selector} misses its pods")
            targets = []
            for c in pod["spec"]["containers"]:
                for port in c.get("ports", []):
                    labels = {"__address__": f"10.0.0.7:{port['containerPort']}", "__metrics_path__": "/metrics",
                              "__meta_kubernetes_pod_name": name + "-abc12",
                              "__meta_kubernetes_pod_container_port_name": port.get("name", "")}
                    for k, v in pod["metadata"].get("annotations", {}).items():
                        labels["__meta_kubernetes_pod_annotation_" + meta(k)] = str(v)
                    for k, v in pod["metadata"]["labels"].items():
                        labels["__meta_kubernetes_pod_label_" + meta(k)] = str(v)
                    kept = relabel(labels)
                    if kept:
                        targets.append(kept)
            self.assertEqual(len(targets), 1, f"{name}: {len(targets)} targets")
            metrics_port = next(p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])
                                if p.get("name") == "metrics")
            self.assertEqual(targets[0]["__address__"], f"10.0.0.7:{metrics_port}", name)
            self.assertEqual(targets[0]["__metrics_path__"], "/metrics", name)
            self.assertEqual(targets[0]["image"], pod["metadata"]["labels"]["app.kubernetes.io/component"], name)

    def test_every_builder_leaves_the_same_files_out_of_the_context(self):
        # BuildKit reads deploy/<Dockerfile>.dockerignore, the legacy builder only the root's
        # .dockerignore (missing until 2026-12-03: a local build/ went in, and CMake refused it).
        def patterns(path):
            with open(os.path.join(ROOT, path)) as f:
                return [l.strip() for l in f if l.strip() and not l.startswith("#")]
        want = patterns(".dockerignore")
        self.assertIn("build/", want)
        for f in ("deploy/Dockerfile.dockerignore", "deploy/Dockerfile.cuda.dockerignore"):
            self.assertEqual(patterns(f), want, f)

    def test_the_memory_budgets_leave_a_quarter_of_the_pod_for_sessions(self):
        for d, c in self.server_containers():
            given = flags(c.get("args", []))
            budget = sum(int(given.get(f) or default(self.help, f)) for f in ("max-store-bytes", "max-prepared-bytes"))
            limit = quantity(c["resources"]["limits"]["memory"])
            self.assertLessEqual(budget, 0.75 * limit,
                                 f"{d['metadata']['name']}: rigs and preparations may take {budget} of {limit} bytes")
            # Uploads in progress: their buffered bytes and the parse of them (until 2026-12-03
            # the default, 2 GiB of buffers, reached the limit with the budgets).
            upload = int(given.get("max-upload-bytes") or default(self.help, "max-upload-bytes"))
            if upload == 0:
                upload = 2 * int(given.get("max-rig-bytes") or default(self.help, "max-rig-bytes"))
            self.assertLessEqual(budget + 2 * upload, 0.9 * limit,
                                 f"{d['metadata']['name']}: with uploads, {budget + 2 * upload} of {limit} bytes")

    def test_servers_are_the_last_pods_evicted(self):
        # Guaranteed QoS (requests equal to limits): every session is in the server's memory, and
        # a Burstable pod above its request is among the first a node short of memory evicts.
        for d, c in self.server_containers():
            r = c["resources"]
            for what in ("cpu", "memory"):
                self.assertIn(what, r.get("limits", {}), f"{d['metadata']['name']}: no limits.{what}")
                self.assertEqual(quantity(str(r["requests"][what])), quantity(str(r["limits"][what])),
                                 f"{d['metadata']['name']}: {what} request below its limit")

    def test_a_rollout_needs_no_gpu_beyond_those_the_pods_hold(self):
        for d, c in self.server_containers():
            if "nvidia.com/gpu" not in c["resources"].get("limits", {}):
                continue
            strategy = d["spec"].get("strategy", {})
            surge = strategy.get("rollingUpdate", {}).get("maxSurge", "25%")
            self.assertTrue(strategy.get("type") == "Recreate" or str(surge) in ("0", "0%"),
                            f"{d['metadata']['name']}: a rolling update surges {surge} pods of a whole GPU each")

    def test_the_grace_period_covers_the_pre_stop_sleep_and_the_drain(self):
        for d, c in self.server_containers():
            given = flags(c.get("args", []))
            drain = float(given.get("drain-timeout") or default(self.help, "drain-timeout"))
            sleep = float(c["lifecycle"]["preStop"]["exec"]["command"][-1])
            grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            self.assertGreaterEqual(grace, sleep + drain + 2, d["metadata"]["name"])

    def test_metrics_stay_off_the_client_service_and_every_port_off_the_hosts_outside_interfaces(self):
        for svc in load("deploy/k8s/service.yaml"):
            ports = [p.get("targetPort") for p in svc["spec"]["ports"]]
            self.assertNotIn("metrics", ports, svc["metadata"]["name"])
            self.assertNotIn(9464, [p["port"] for p in svc["spec"]["ports"]], svc["metadata"]["name"])
        for name, svc in load("deploy/compose.yaml")[0]["services"].items():
            for mapping in svc.get("ports", []):
                # Every published port: the servers' gRPC and /metrics, and Prometheus's query API,
                # which shows what it scraped.
                self.assertTrue(str(mapping).startswith("127.0.0.1:"), f"{name} publishes {mapping}")

    def test_pods_run_as_the_images_numeric_non_root_user(self):
        # The images' USER is numeric (a name cannot be checked against runAsNonRoot), and every
        # pod runs as it, non-root, with the runtime's seccomp profile (Pod Security "restricted").
        users = set()
        for dockerfile in ("deploy/Dockerfile", "deploy/Dockerfile.cuda"):
            with open(os.path.join(ROOT, dockerfile)) as f:
                found = re.findall(r"^USER (\S+)$", f.read(), re.M)
            self.assertEqual(len(found), 1, dockerfile)
            self.assertRegex(found[0], r"^\d+:\d+$", f"{dockerfile}: USER {found[0]} is not numeric")
            users.add(found[0])
        self.assertEqual(len(users), 1, users)
        uid, gid = (int(x) for x in users.pop().split(":"))
        self.assertNotEqual(uid, 0)
        pods = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in self.deployments]
        for f in ("deploy/k8s/batch-job.yaml", "deploy/k8s/batch-merge-job.yaml"):
            pods += [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in load(f) if d["kind"] == "Job"]
        pods += [(d["metadata"]["name"], d["spec"]) for d in load("deploy/k8s/batch-data.yaml") if d["kind"] == "Pod"]
        self.assertGreaterEqual(len(pods), 5)
        for name, spec in pods:
            ctx = spec.get("securityContext", {})
            self.assertIs(ctx.get("runAsNonRoot"), True, name)
            self.assertEqual((ctx.get("runAsUser"), ctx.get("runAsGroup"), ctx.get("fsGroup")), (uid, gid, gid), name)
            self.assertEqual(ctx.get("seccompProfile", {}).get("type"), "RuntimeDefault", name)
            for c in spec["containers"]:
                self.assertIs(c.get("securityContext", {}).get("allowPrivilegeEscalation"), False, f"{name}/{c['name']}")

    def test_every_client_flag_the_batch_jobs_pass_is_one_the_cli_has(self):
        out = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=60)
        known = set(re.findall(r"--([a-z0-9-]+)", out.stdout + out.stderr))
        self.assertIn("connect-timeout", known, "the binary is older than the source: build it")
        for f in ("deploy/k8s/batch-job.yaml", "deploy/k8s/batch-merge-job.yaml"):
            for d in load(f):
                for c in d["spec"]["template"]["spec"]["containers"]:
                    self.assertEqual(c["command"], ["sinew"], f)
                    given = flags(c.get("args", []))
                    self.assertLessEqual(set(given), known, f"{f}: flags `sinew --help` does not list")
                    if "target" in given:
                        # A shard started while the server rolls out or scales up waits for it
                        # instead of spending one of the Job's retries (the default wait is 10 s).
                        self.assertGreaterEqual(float(given.get("connect-timeout") or 0), 60, f)

    def test_the_batch_volume_is_there_to_fill_before_the_job_starts(self):
        # The Job's file holds no volume: the asset goes in through the loader pod of
        # batch-data.yaml, which mounts the claim the shards and the merge mount.
        claims = {d["metadata"]["name"] for d in load("deploy/k8s/batch-data.yaml") if d["kind"] == "PersistentVolumeClaim"}
        loaders = [d for d in load("deploy/k8s/batch-data.yaml") if d["kind"] == "Pod"]
        self.assertEqual(len(claims), 1)
        self.assertEqual(len(loaders), 1)
        for f in ("deploy/k8s/batch-job.yaml", "deploy/k8s/batch-merge-job.yaml"):
            docs = load(f)
            self.assertEqual([d["kind"] for d in docs], ["Job"], f)
            used = {v["persistentVolumeClaim"]["claimName"] for v in docs[0]["spec"]["template"]["spec"]["volumes"]}
            self.assertEqual(used, claims, f)
        used = {v["persistentVolumeClaim"]["claimName"] for v in loaders[0]["spec"]["volumes"]}
        self.assertEqual(used, claims)

    def test_each_client_service_selects_one_deployment_and_none_starts_at_zero(self):
        # A client asking for the GPU must not be pinned (IP affinity, an hour) to a CPU pod, and
        # re-applying a kustomization must not scale a Deployment back to zero.
        # Headless ones too: a balancer hashing over a mixed set sent GPU clients to CPU pods
        # (until 2026-12-03 sinew-server-headless selected both Deployments).
        services = [s for f in ("deploy/k8s/service.yaml", "deploy/k8s/gpu/service-gpu.yaml") for s in load(f)]
        self.assertEqual(len(services), 4)
        for svc in services:
            selector = svc["spec"]["selector"].items()
            chosen = [d["metadata"]["name"] for d in self.deployments
                      if selector <= d["spec"]["template"]["metadata"]["labels"].items()]
            self.assertEqual(len(chosen), 1, f"{svc['metadata']['name']} selects {chosen}")
        for d in self.deployments:
            self.assertGreater(d["spec"].get("replicas", 1), 0, d["metadata"]["name"])
        for k in ("deploy/k8s/kustomization.yaml", "deploy/k8s/gpu/kustomization.yaml"):
            for resource in load(k)[0]["resources"]:
                self.assertTrue(os.path.exists(os.path.join(ROOT, os.path.dirname(k), resource)), f"{k}: {resource}")

    def test_envoy_admits_as_many_streams_as_the_replicas_take_sessions(self):
        # A stream is one request while it plays; Envoy's default cap is 1024 for the cluster.
        envoy = load("deploy/envoy.yaml")[0]
        cluster = next(c for c in envoy["static_resources"]["clusters"] if c["name"] == "sinew")
        limits = {t.get("priority", "DEFAULT"): t for t in cluster["circuit_breakers"]["thresholds"]}
        sessions = 0
        for d, c in self.server_containers():
            per = int(flags(c.get("args", [])).get("max-sessions") or default(self.help, "max-sessions"))
            sessions += per * max(d["spec"].get("replicas", 1), 1)
        for key in ("max_requests", "max_pending_requests", "max_connections"):
            self.assertGreaterEqual(limits["DEFAULT"][key], 4 * sessions, key)

    def test_every_container_states_cpu_and_memory_requests_and_a_memory_limit(self):
        # A namespace with a ResourceQuota on them refuses a pod that states none: until
        # 2026-12-07 the merge Job's pod had no resources and was never created there.
        found = list(k8s_containers())
        self.assertGreaterEqual(len(found), 5)
        for where, c in found:
            resources = c.get("resources", {})
            for kind, what in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
                self.assertIn(what, resources.get(kind, {}), f"{where}: no resources.{kind}.{what}")
            self.assertLessEqual(quantity(resources["requests"]["memory"]), quantity(resources["limits"]["memory"]),
                                 where)

    def test_no_grpc_probe_checks_a_port_that_speaks_tls(self):
        # Kubernetes' native grpc probes speak plaintext only: a server given --tls-cert closes
        # their connections and the pod is never Ready (and the liveness probe restarts it).
        # deploy/README.md gives the exec probe to use instead.
        self.assertEqual([p for where, c in k8s_containers() for p in tls_ports_probed_by_grpc(where, c)], [])
        # The check itself: a Deployment's server given TLS as the README's fragment gives it, its
        # grpc probes kept, is caught; with the fragment's exec probes in their place, it is not.
        (d, c), *_ = self.server_containers()
        fragment = readme_tls_fragment()
        tls = [a for a in fragment["args"] if str(a).startswith("--tls-")]
        self.assertEqual(set(flags(tls)), {"tls-cert", "tls-key"}, "the README's fragment gives the server TLS")
        given = dict(c, args=list(c.get("args", [])) + tls)
        self.assertEqual(tls_ports_probed_by_grpc("with TLS", given),
                         ["with TLS: readinessProbe", "with TLS: livenessProbe"])
        self.assertEqual(tls_ports_probed_by_grpc("with TLS", dict(given, **fragment)), [])
        listening = dict(given, args=given["args"] + ["--listen=0.0.0.0:50443"])  # the probes on another port
        self.assertEqual(tls_ports_probed_by_grpc("elsewhere", listening), [])

    def test_the_readmes_tls_probe_passes_where_the_plaintext_probe_fails(self):
        # The exec probe of deploy/README.md, run here against a server started with the
        # fragment's TLS flags (a CA and a certificate for sinew-server made by openssl, mounted
        # at /etc/sinew/tls there, a folder here): it passes, and its flags are the CLI's. A
        # plaintext call, what the kubelet's grpc probe makes, is refused.
        fragment = readme_tls_fragment()
        out = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=60)
        known = set(re.findall(r"--([a-z0-9-]+)", out.stdout + out.stderr))
        probes = [fragment[p]["exec"]["command"] for p in ("readinessProbe", "livenessProbe")]
        for command in probes:
            self.assertEqual(command[0], "sinew")
            self.assertLessEqual(set(flags(command[1:])), known, command)
            self.assertIn("tls-ca", flags(command[1:]))
        tmp = tempfile.mkdtemp(prefix="sinew-tls-probe-")
        try:
            make_pki(tmp, "sinew-server")

            def here(args):  # the Secret's mount is the folder here
                return [str(a).replace("/etc/sinew/tls/", tmp + "/") for a in args]

            tls = here(a for a in fragment["args"] if str(a).startswith("--tls-"))
            server = subprocess.Popen([SERVER, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--gpu", "off",
                                       "--cache-dir", tmp] + tls,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                target, seen = None, []
                for line in server.stdout:
                    seen.append(line)
                    m = re.search(r"grpc listening on (\S+)", line)
                    if m:
                        target = m.group(1)
                        break
                self.assertIsNotNone(target, "".join(seen))
                for command in probes:
                    args = [a.replace("127.0.0.1:50051", target) for a in here(command[1:])]
                    run = subprocess.run([CLI] + args, capture_output=True, text=True, timeout=60,
                                         env=dict(os.environ, SINEW_TOKEN=""))
                    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                plain = subprocess.run([CLI, "--target", target, "--connect-timeout", "2", "info"],
                                       capture_output=True, text=True, timeout=60, env=dict(os.environ, SINEW_TOKEN=""))
                self.assertNotEqual(plain.returncode, 0, "a plaintext call reached the TLS server")
                self.assertIn("expects TLS", plain.stderr)
            finally:
                server.terminate()
                server.wait(60)
                server.stdout.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def pod_specs(doc):
    """The pod specs of a Kubernetes object: a Pod's own, a workload's template's."""
    kind, spec = doc.get("kind"), doc.get("spec", {})
    if kind == "Pod":
        yield spec
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield spec["template"]["spec"]
    elif kind == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]


def k8s_containers():
    """(where, container) of every container, init containers too, in deploy/k8s/**."""
    for folder, _, files in sorted(os.walk(os.path.join(ROOT, "deploy/k8s"))):
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.relpath(os.path.join(folder, name), ROOT)
            for doc in load(path):
                for spec in pod_specs(doc):
                    for c in spec.get("initContainers", []) + spec.get("containers", []):
                        yield f"{path}: {doc['metadata']['name']}/{c['name']}", c


def image_entrypoint(image):
    """The ENTRYPOINT of the Dockerfile an image is built from (sinew-server, sinew-server-cuda)."""
    name = str(image).rsplit("/", 1)[-1].split(":")[0]
    dockerfile = {"sinew-server": "deploy/Dockerfile", "sinew-server-cuda": "deploy/Dockerfile.cuda"}.get(name)
    if dockerfile is None:
        return []
    with open(os.path.join(ROOT, dockerfile)) as f:
        m = re.search(r"^ENTRYPOINT (\[.*\])$", f.read(), re.M)
    return yaml.safe_load(m.group(1))


def tls_ports_probed_by_grpc(where, container):
    """'where: probe' for each grpc probe of a container whose server speaks TLS (--tls-cert) on
    the port the probe checks (--listen, the entrypoint's or the args', the last one given)."""
    given = flags(list(container.get("command") or image_entrypoint(container.get("image", ""))) +
                  list(container.get("args", [])))
    if "tls-cert" not in given:
        return []
    port = int(str(given.get("listen") or ":50051").rsplit(":", 1)[1])
    return [f"{where}: {p}" for p in ("startupProbe", "readinessProbe", "livenessProbe")
            if int(container.get(p, {}).get("grpc", {}).get("port", -1)) == port]


def readme_tls_fragment():
    """The container fragment deploy/README.md gives for a server with TLS (its yaml block that
    has an exec readinessProbe)."""
    with open(os.path.join(ROOT, "deploy/README.md")) as f:
        blocks = re.findall(r"^[ \t]*```yaml\n(.*?)^[ \t]*```", f.read(), re.M | re.S)
    found = [yaml.safe_load(textwrap.dedent(b)) for b in blocks if "readinessProbe:" in b and "exec:" in b]
    assert len(found) == 1, f"deploy/README.md: {len(found)} yaml blocks with an exec readinessProbe"
    return found[0]


def make_pki(folder, name):
    """A CA (ca.crt) and a server certificate for `name` (tls.crt, tls.key), as a Secret of type
    kubernetes.io/tls with its CA (cert-manager's) holds them, made by openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(os.path.join(folder, "san.cnf"), "w") as f:
        f.write(f"subjectAltName=DNS:{name}\n")
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=sinew-deploy-test-ca", "-keyout", "ca.key", "-out", "ca.crt")
    run("req", *ec, "-subj", f"/CN={name}", "-keyout", "tls.key", "-out", "tls.csr")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-out", "tls.crt", "-extfile", "san.cnf")


if __name__ == "__main__":
    unittest.main()
