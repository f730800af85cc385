// Checks deploy/ offline: every kustomize overlay renders (kubectl kustomize), every rendered
// object validates against the Kubernetes schemas (kubernetes-models; Prometheus Operator
// CRDs with @kubernetes-models/prometheus-operator; the Gateway API Inference Extension's
// InferencePool against its CRD in tests/data/gie, with ajv), the invariants that break
// deployments silently hold, and the Dockerfiles lint clean and copy only what the build
// produces.
//   node tests/node/k8s_check.mjs SOURCE_DIR BUILD_DIR
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import YAML from "yaml";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const [src, build] = process.argv.slice(2);
let passed = 0, failed = 0;
const check = (ok, what) => {
  if (ok) { passed++; } else { failed++; console.log(`FAIL ${what}`); }
};

const models = {
  "v1/Service": "kubernetes-models/v1/Service",
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
  "v1/ServiceAccount": "kubernetes-models/v1/ServiceAccount",
  "v1/PersistentVolumeClaim": "kubernetes-models/v1/PersistentVolumeClaim",
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "networking.k8s.io/v1/NetworkPolicy": "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
  "autoscaling/v2/HorizontalPodAutoscaler": "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler",
  "monitoring.coreos.com/v1/PodMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor",
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
};

// CRDs without an npm model: their openAPIV3Schema, compiled by ajv (Kubernetes' x-kubernetes-*
// extensions are not JSON Schema keywords, so strict mode is off; their CEL rules are checked
// by hand below).
const crd = (file, version) => {
  const doc = YAML.parse(readFileSync(path.join(src, "tests/data", file), "utf8"));
  const schema = doc.spec.versions.find((v) => v.name === version).schema.openAPIV3Schema;
  const ajv = new Ajv({ strict: false, allErrors: true, formats: { int32: true, int64: true } });
  addFormats(ajv);
  return ajv.compile(schema);
};
const crdSchemas = {
  "inference.networking.k8s.io/v1/InferencePool":
    crd("gie/inference.networking.k8s.io_inferencepools.yaml", "v1"),
};

const flag = (args, name) => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? undefined : a.slice(name.length + 3);
};
const portOf = (addr) => Number(addr.slice(addr.lastIndexOf(":") + 1));
const qty = (v) => (v === undefined ? undefined : String(v));

const overlays = readdirSync(path.join(src, "deploy/k8s/overlays"));
for (const overlay of overlays) {
  const dir = path.join(src, "deploy/k8s/overlays", overlay);
  let rendered;
  try {
    rendered = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
    check(true, `${overlay}: renders`);
  } catch (e) {
    check(false, `${overlay}: kubectl kustomize failed: ${e.message}`);
    continue;
  }
  const objects = YAML.parseAllDocuments(rendered).map((d) => d.toJS()).filter(Boolean);
  for (const o of objects) {
    const key = `${o.apiVersion}/${o.kind}`;
    if (key === "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet") {
      // Its CRD has no offline schema here: its two pod templates validate as Kubernetes' own.
      const { PodTemplate } = await import("kubernetes-models/v1/PodTemplate");
      const t = o.spec.leaderWorkerTemplate;
      for (const [which, template] of [["leader", t.leaderTemplate], ["worker", t.workerTemplate]]) {
        try {
          new PodTemplate({ metadata: { name: which }, template }).validate();
          check(true, `${overlay}: LeaderWorkerSet ${which} template valid`);
        } catch (e) {
          check(false, `${overlay}: LeaderWorkerSet ${which} template invalid: ${e.message}`);
        }
      }
      continue;
    }
    if (crdSchemas[key]) {
      const validate = crdSchemas[key];
      check(validate(o), `${overlay}: ${o.kind}/${o.metadata.name} valid against its CRD: ` +
            JSON.stringify(validate.errors));
      continue;
    }
    const mod = models[key];
    if (!mod) { check(false, `${overlay}: no schema for ${key}`); continue; }
    const { [o.kind]: Model } = await import(mod);
    try {
      new Model(o).validate();
      check(true, `${overlay}: ${o.kind}/${o.metadata.name} valid`);
    } catch (e) {
      check(false, `${overlay}: ${o.kind}/${o.metadata.name} invalid: ${e.message}`);
    }
  }

  const find = (kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
  // A LeaderWorkerSet's leaders are the workers the gateway sees; its followers are checked
  // with the group below.
  const lws = find("LeaderWorkerSet", "walsh-worker");
  const worker = lws
    ? { spec: { template: lws.spec.leaderWorkerTemplate.leaderTemplate, serviceName: "walsh-worker" } }
    : find("StatefulSet", "walsh-worker");
  const gateway = find("Deployment", "walsh-gateway");
  const headless = find("Service", "walsh-worker");
  const gwService = find("Service", "walsh-gateway");
  check(worker && gateway && headless && gwService, `${overlay}: worker, gateway and services present`);
  if (!(worker && gateway && headless && gwService)) continue;
  const config = find("ConfigMap", "walsh-config")?.data ?? {};
  const expand = (args) => args.map((a) => a.replace(/\$\((\w+)\)/g, (_, v) => config[v] ?? `$(${v})`));

  for (const [what, pod, grpcPort, metricsPort] of [["worker", worker, 50051, 9090], ["gateway", gateway, 8080, 9091]]) {
    const spec = pod.spec.template.spec;
    const c = spec.containers[0];
    const args = expand(c.args);
    const port = (n) => c.ports.find((p) => p.name === n)?.containerPort;
    check(portOf(flag(args, "listen")) === port("grpc") && port("grpc") === grpcPort,
          `${overlay}: ${what} --listen port equals its grpc containerPort`);
    check(portOf(flag(args, "metrics-listen")) === port("metrics") && port("metrics") === metricsPort,
          `${overlay}: ${what} --metrics-listen port equals its metrics containerPort`);
    // With --probe-listen (TLS: the kubelet cannot speak it) probes go to that plaintext port.
    const probeListen = flag(args, "probe-listen");
    const healthPort = probeListen ? port("probe") : port("grpc");
    if (probeListen) {
      check(portOf(probeListen) === port("probe"), `${overlay}: ${what} --probe-listen port equals its probe containerPort`);
    }
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      check(c[probe]?.grpc?.port === healthPort, `${overlay}: ${what} ${probe} is a gRPC probe on the health port`);
    }
    // A TLS server is probed on its plaintext probe port, never on the TLS one.
    if (flag(args, "tls-cert-file")) {
      check(probeListen !== undefined, `${overlay}: ${what} serves TLS and sets --probe-listen for the kubelet`);
    }
    // Every certificate and key flag names a file in a read-only Secret volume.
    for (const a of args.filter((x) => /^--[\w-]*tls-[\w-]*-file=/.test(x))) {
      const file = a.slice(a.indexOf("=") + 1);
      const mount = (c.volumeMounts ?? []).find((m) => file.startsWith(m.mountPath + "/"));
      const volume = mount && spec.volumes.find((v) => v.name === mount.name);
      check(mount?.readOnly === true && volume?.secret?.secretName,
            `${overlay}: ${what} ${a.split("=")[0]} is in a read-only Secret volume`);
    }
    check(c.livenessProbe?.grpc?.service === "liveness" && !c.readinessProbe.grpc.service,
          `${overlay}: ${what} liveness uses the "liveness" service, readiness the server's status`);
    check(Number(pod.spec.template.metadata.annotations["prometheus.io/port"]) === port("metrics"),
          `${overlay}: ${what} prometheus.io/port annotation is the metrics port`);
    const grace = Number(flag(args, "drain-grace-seconds"));
    check(spec.terminationGracePeriodSeconds >= grace + 5 && spec.terminationGracePeriodSeconds <= grace + 30,
          `${overlay}: ${what} terminationGracePeriodSeconds (${spec.terminationGracePeriodSeconds}) matches --drain-grace-seconds ${grace} plus a margin`);
    for (const k of ["cpu", "memory"]) {
      check(qty(c.resources?.requests?.[k]) && qty(c.resources?.limits?.[k]), `${overlay}: ${what} sets ${k} requests and limits`);
    }
    check(spec.securityContext?.runAsNonRoot === true, `${overlay}: ${what} runs as non-root`);
    check(spec.automountServiceAccountToken === false && spec.serviceAccountName === "walsh",
          `${overlay}: ${what} uses the walsh service account without a token`);
  }

  // The gateway finds the workers through the headless service's DNS name.
  const gwArgs = expand(gateway.spec.template.spec.containers[0].args);

  // The HTTP API, where enabled: its port is the container's and the Service's "http" port (with
  // --tls-cert-file it is HTTPS, with the gRPC port's certificate).
  const httpListen = flag(gwArgs, "http-listen");
  if (httpListen) {
    const gwPort = (n) => gateway.spec.template.spec.containers[0].ports.find((p) => p.name === n);
    const svc = find("Service", "walsh-gateway");
    check(portOf(httpListen) === gwPort("http")?.containerPort,
          `${overlay}: gateway --http-listen port equals its http containerPort`);
    check(svc?.spec.ports.some((p) => p.name === "http" && p.targetPort === "http"),
          `${overlay}: the gateway Service exposes the http port`);
  }
  const dns = flag(gwArgs, "workers-dns");
  check(headless.spec.clusterIP === "None", `${overlay}: the worker service is headless`);
  check(dns && dns.split(":")[0].split(".")[0] === headless.metadata.name,
        `${overlay}: gateway --workers-dns (${dns}) names the headless service ${headless.metadata.name}`);
  check(portOf(dns) === headless.spec.ports.find((p) => p.name === "grpc").port,
        `${overlay}: gateway --workers-dns port is the worker service's grpc port`);
  check(worker.spec.serviceName === headless.metadata.name, `${overlay}: the StatefulSet's serviceName is the headless service`);

  // TLS on workers means the gateway speaks it to them: it trusts a CA, and presents a client
  // certificate when workers demand one.
  const wTls = expand(worker.spec.template.spec.containers[0].args);
  if (flag(wTls, "tls-cert-file")) {
    check(flag(gwArgs, "worker-tls-ca-file") && flag(gwArgs, "worker-tls-server-name"),
          `${overlay}: workers serve TLS and the gateway trusts their CA and names them`);
  }
  if (flag(wTls, "tls-client-ca-file")) {
    check(flag(gwArgs, "worker-tls-cert-file") && flag(gwArgs, "worker-tls-key-file"),
          `${overlay}: workers demand client certificates and the gateway presents one`);
  }

  // GPUs requested equal --tp; CPU workers ask for none.
  const wc = worker.spec.template.spec.containers[0];
  const wArgs = expand(wc.args);
  const tp = Number(flag(wArgs, "tp"));
  const gpus = wc.resources.limits?.["nvidia.com/gpu"];
  const nnodes = Number(flag(wArgs, "nnodes") ?? 1);
  if (flag(wArgs, "device") === "cuda") {
    check(Number(gpus) === tp && Number(wc.resources.requests["nvidia.com/gpu"]) === tp,
          `${overlay}: nvidia.com/gpu requests and limits (${gpus}) equal --tp ${tp}`);
  } else {
    check(gpus === undefined && tp === nnodes,
          `${overlay}: CPU workers request no GPU and hold one rank each (--tp ${tp}, --nnodes ${nnodes})`);
  }
  if (lws) {
    // One rank per pod: the group's size is --nnodes and --tp; the leader is rank 0 and listens on
    // the handshake port its followers dial; each follower's rank is its worker index.
    const t = lws.spec.leaderWorkerTemplate;
    const fc = t.workerTemplate.spec.containers[0];
    const fArgs = expand(fc.args);
    check(t.size === nnodes && Number(flag(fArgs, "nnodes")) === nnodes && Number(flag(fArgs, "tp")) === tp,
          `${overlay}: the group size (${t.size}) is --nnodes and --tp of leader and followers`);
    check(flag(wArgs, "node-rank") === "0" && flag(fArgs, "node-rank") === "$(LWS_WORKER_INDEX)",
          `${overlay}: the leader is rank 0 and each follower its worker index`);
    const init = flag(wArgs, "dist-init-addr");
    check(init?.startsWith("$(LWS_LEADER_ADDRESS):") && flag(fArgs, "dist-init-addr") === init &&
          wc.ports.some((p) => p.containerPort === portOf(init)),
          `${overlay}: followers dial the leader's handshake port (${init}), which its container exposes`);
    check(flag(fArgs, "model") === flag(wArgs, "model") && !flag(fArgs, "listen"),
          `${overlay}: followers load the leader's model and serve no gRPC`);
    check(t.workerTemplate.metadata.labels["app.kubernetes.io/name"] !== "walsh-worker",
          `${overlay}: the headless worker Service (the gateway's) selects leaders only`);
    check(t.restartPolicy === "RecreateGroupOnPodRestart", `${overlay}: a group restarts as one`);
    const policy = objects.find((o) => o.kind === "NetworkPolicy");
    const member = t.leaderTemplate.metadata.labels["walsh.dev/rank-group"];
    check(policy && member && t.workerTemplate.metadata.labels["walsh.dev/rank-group"] === member &&
          policy.spec.podSelector.matchLabels["walsh.dev/rank-group"] === member,
          `${overlay}: a NetworkPolicy keeps the group's ports to its members`);
    const hpa = find("HorizontalPodAutoscaler", "walsh-worker");
    check(!hpa || hpa.spec.scaleTargetRef.kind === "LeaderWorkerSet",
          `${overlay}: the worker autoscaler scales the groups`);
  }
  // An InferencePool selects the worker pods on their own HTTP port (--http-listen).
  const pool = objects.find((o) => o.kind === "InferencePool");
  if (pool) {
    const httpPort = wc.ports.find((p) => p.name === "http")?.containerPort;
    check(flag(wArgs, "http-listen") && portOf(flag(wArgs, "http-listen")) === httpPort,
          `${overlay}: workers of an InferencePool serve --http-listen on their http containerPort`);
    check(pool.spec.targetPorts.length === 1 && pool.spec.targetPorts[0].number === httpPort,
          `${overlay}: the InferencePool's targetPorts are the workers' http port`);
    const labels = worker.spec.template.metadata.labels;
    check(Object.entries(pool.spec.selector.matchLabels).every(([k, v]) => labels[k] === v),
          `${overlay}: the InferencePool's selector matches the worker pods`);
    const ref = pool.spec.endpointPickerRef;
    check((ref.kind ?? "Service") !== "Service" || ref.port?.number > 0,
          `${overlay}: the endpoint picker Service reference has a port (the CRD's CEL rule)`);
    check(!flag(wArgs, "tls-client-ca-file"),
          `${overlay}: InferencePool workers do not demand client certificates (walsh-worker refuses)`);
  }
  const mount = wc.volumeMounts.find((m) => m.mountPath === "/models");
  check(mount?.readOnly === true && flag(wArgs, "model").startsWith("/models/"),
        `${overlay}: the model is mounted read-only at /models and passed by flag`);
}


// Dockerfiles: lint, and every path copied from the build stage is something the build makes.
const require = createRequire(import.meta.url);
const lint = require.resolve("dockerfilelint/bin/dockerfilelint");
for (const f of readdirSync(path.join(src, "deploy/docker")).filter((f) => f.endsWith(".Dockerfile"))) {
  const file = path.join(src, "deploy/docker", f);
  try {
    execFileSync(process.execPath, [lint, file], { encoding: "utf8", cwd: src });
    check(true, `${f}: dockerfilelint`);
  } catch (e) {
    check(false, `${f}: dockerfilelint: ${e.stdout}`);
  }
  const text = readFileSync(file, "utf8").replace(/\\\n/g, " ");
  for (const line of text.split("\n")) {
    const m = line.match(/^COPY\s+--from=build\s+(.*)$/);
    if (!m) continue;
    const parts = m[1].trim().split(/\s+/);
    for (const p of parts.slice(0, -1)) {
      const built = path.join(build, p.replace(/^\/build\//, ""));
      check(existsSync(built), `${f}: COPY source ${p} is built (${built})`);
    }
  }
  check(/^USER\s+\d+/m.test(text) && /^HEALTHCHECK/m.test(text), `${f}: non-root USER and a HEALTHCHECK`);
  check(/--target/.test(text) && /-DWALSH_BUILD_TESTS=OFF/.test(text), `${f}: builds only the shipped targets`);
}

console.log(`k8s/docker checks: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
