// deploy/: every resource of the kustomize base validated with ajv against the published
// Kubernetes, Gateway API and InferencePool schemas (vendored and pruned under
// test/fixtures/k8s-schemas/, see its README), the endpoint picker's config against llm-d's
// types, and the references between them checked: what the Deployment labels is what the
// Service and InferencePool select, the server's flags parse with the real command line,
// the picker's metric names are ones this server serves, and the Containerfile copies files
// that exist.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parseCli } from '../src/cli-options.js';
import { ServerMetrics } from '../src/server/metrics.js';

const ROOT = join(import.meta.dirname, '..');
const BASE = join(ROOT, 'deploy/kustomize');
const SCHEMAS = join(ROOT, 'test/fixtures/k8s-schemas');

type Resource = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [key: string]: any };

const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8'));
// kustomization.yaml and the resources are written as JSON, which is YAML too.
const kustomization = readJson(join(BASE, 'kustomization.yaml')) as { apiVersion: string; kind: string; resources: string[] };
const resources: Array<Resource & { file: string }> = kustomization.resources.map((file) => ({ file, ...(readJson(join(BASE, file)) as Resource) }));
const find = (kind: string, name: string): Resource => {
  const found = resources.find((r) => r.kind === kind && r.metadata.name === name);
  expect(found, `${kind} ${name}`).toBeDefined();
  return found!;
};

// The published schemas carry OpenAPI keywords and formats ajv does not know (int-or-string,
// x-kubernetes-*): validate what ajv understands, ignore the rest.
const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true });
const SCHEMA_OF: Record<string, string> = {
  'apps/v1 Deployment': 'deployment-apps-v1.json',
  'v1 Service': 'service-v1.json',
  'v1 ConfigMap': 'configmap-v1.json',
  'v1 PersistentVolumeClaim': 'persistentvolumeclaim-v1.json',
  'v1 ServiceAccount': 'serviceaccount-v1.json',
  'rbac.authorization.k8s.io/v1 Role': 'role-rbac-v1.json',
  'rbac.authorization.k8s.io/v1 RoleBinding': 'rolebinding-rbac-v1.json',
  'gateway.networking.k8s.io/v1 HTTPRoute': 'httproute-gateway-v1.json',
  'inference.networking.k8s.io/v1 InferencePool': 'inferencepool-inference-v1.json',
};
const validators = new Map(Object.entries(SCHEMA_OF).map(([kind, file]) => [kind, ajv.compile(readJson(join(SCHEMAS, file)))]));

describe('deploy/kustomize', () => {
  it('lists every manifest of the directory once, and nothing else', () => {
    expect(kustomization).toMatchObject({ apiVersion: 'kustomize.config.k8s.io/v1beta1', kind: 'Kustomization' });
    const files = readdirSync(BASE).filter((f) => f.endsWith('.json'));
    expect([...kustomization.resources].sort()).toEqual(files.sort());
  });

  it('rejects a misspelt field and a wrong type, so the validation below has teeth', () => {
    const { file: _file, ...deployment } = find('Deployment', 'mlxcel');
    const validate = validators.get('apps/v1 Deployment')!;
    const misspelt = structuredClone(deployment);
    misspelt.spec.template.spec.containers[0].readinesProbe = misspelt.spec.template.spec.containers[0].readinessProbe;
    expect(validate(misspelt)).toBe(false);
    const mistyped = structuredClone(deployment);
    mistyped.spec.replicas = 'three';
    expect(validate(mistyped)).toBe(false);
  });

  it.each(resources.map((r) => [`${r.kind} ${r.metadata.name}`, r] as const))('%s is valid against its published schema', (_name, resource) => {
    const { file, ...doc } = resource;
    const validate = validators.get(`${doc.apiVersion} ${doc.kind}`);
    expect(validate, `a schema for ${doc.apiVersion} ${doc.kind} (${file})`).toBeDefined();
    expect(validate!(doc) ? [] : validate!.errors).toEqual([]);
  });

  it('has the model servers selected by their Service and the InferencePool, on the port they listen on, with probes on /ready and /live', () => {
    const deployment = find('Deployment', 'mlxcel');
    const pod = deployment.spec.template;
    const [server] = pod.spec.containers;
    const labels = pod.metadata.labels as Record<string, string>;
    const selects = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
    expect(selects(deployment.spec.selector.matchLabels)).toBe(true);
    expect(selects(find('Service', 'mlxcel').spec.selector)).toBe(true);
    const pool = find('InferencePool', 'mlxcel');
    expect(selects(pool.spec.selector.matchLabels)).toBe(true);
    const http = server.ports.find((p: { name: string }) => p.name === 'http').containerPort;
    expect(pool.spec.targetPorts).toEqual([{ number: http }]);
    expect([server.readinessProbe.httpGet.path, server.startupProbe.httpGet.path, server.livenessProbe.httpGet.path]).toEqual(['/ready', '/ready', '/live']);
    // A rollout adds a replica before it drains one.
    expect(deployment.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: 1 });
    for (const volume of [...pod.spec.volumes, ...find('Deployment', 'mlxcel-redis').spec.template.spec.volumes]) {
      find('PersistentVolumeClaim', volume.persistentVolumeClaim.claimName);
    }
  });

  it("starts the server with flags and variables the command line accepts, draining within the pod's grace period", () => {
    const pod = find('Deployment', 'mlxcel').spec.template.spec;
    const [server] = pod.containers;
    const env = Object.fromEntries(server.env.map((e: { name: string; value: string }) => [e.name, e.value]));
    const command = parseCli(server.args, env, 'unused');
    expect(command.kind).toBe('serve');
    if (command.kind !== 'serve') return;
    const { options } = command;
    expect(options).toMatchObject({ host: '0.0.0.0', port: 8080, metrics: true, storeSpec: { kind: 'redis', url: 'redis://mlxcel-redis:6379' } });
    expect(options.model).toEqual({ kind: 'repo', ref: { repo: 'mlx-community/Qwen3-0.6B-4bit', revision: 'main' } });
    const redis = find('Service', 'mlxcel-redis').spec.ports[0].port;
    expect(new URL(env.MLXCEL_STORE).port).toBe(String(redis));
    // preStop's sleep, then the drain, inside the time Kubernetes waits before SIGKILL.
    expect(server.lifecycle.preStop.sleep.seconds + options.shutdownGraceSecs!).toBeLessThan(pod.terminationGracePeriodSeconds);
  });

  it('routes the gateway to the InferencePool, whose endpoint picker reads its config and this server\'s metrics', () => {
    const pool = find('InferencePool', 'mlxcel');
    const route = find('HTTPRoute', 'mlxcel');
    expect(route.spec.rules[0].backendRefs).toEqual([{ group: 'inference.networking.k8s.io', kind: 'InferencePool', name: pool.metadata.name }]);
    const eppService = find('Service', pool.spec.endpointPickerRef.name);
    expect(eppService.spec.ports.map((p: { port: number }) => p.port)).toContain(pool.spec.endpointPickerRef.port.number);
    const epp = find('Deployment', eppService.metadata.name).spec.template.spec;
    expect(epp.serviceAccountName).toBe(find('RoleBinding', 'mlxcel-epp').subjects[0].name);
    const args: string[] = epp.containers[0].args;
    expect(args[args.indexOf('--pool-name') + 1]).toBe(pool.metadata.name);

    // The config file the picker is given is the ConfigMap's key, mounted where it looks.
    const configPath = args[args.indexOf('--config-file') + 1]!;
    const mount = epp.containers[0].volumeMounts.find((m: { mountPath: string }) => configPath.startsWith(`${m.mountPath}/`));
    const volume = epp.volumes.find((v: { name: string }) => v.name === mount.name);
    const configMap = find('ConfigMap', volume.configMap.name);
    const config = JSON.parse(configMap.data[configPath.slice(mount.mountPath.length + 1)]);
    const validate = ajv.compile(readJson(join(SCHEMAS, 'endpointpickerconfig-llm-d-v1alpha1.json')));
    expect(validate(config) ? [] : validate.errors).toEqual([]);
    const declared = new Set(config.plugins.map((p: { name?: string; type: string }) => p.name ?? p.type));
    const refs = [
      ...config.schedulingProfiles.flatMap((p: { plugins: Array<{ pluginRef: string }> }) => p.plugins.map((x) => x.pluginRef)),
      ...config.dataLayer.sources.flatMap((s: { pluginRef: string; extractors: Array<{ pluginRef: string }> }) => [s.pluginRef, ...s.extractors.map((e) => e.pluginRef)]),
    ];
    for (const ref of refs) expect(declared, ref).toContain(ref);

    // The pods' engine label picks the engineConfigs entry naming this server's own metrics,
    // each of which it serves, as it serves the vLLM names the picker reads by default.
    const extractor = config.plugins.find((p: { type: string }) => p.type === 'core-metrics-extractor').parameters;
    const labels = find('Deployment', 'mlxcel').spec.template.metadata.labels;
    const engine = extractor.engineConfigs.find((e: { name: string }) => e.name === labels[extractor.engineLabelKey]);
    expect(engine).toBeDefined();
    const served = new ServerMetrics(() => undefined).registry.getMetricsAsArray().map((m) => m.name);
    const specs = [engine.queuedRequestsSpec, engine.runningRequestsSpec, engine.kvUsageSpec, engine.cacheInfoSpec];
    expect(specs.every((name: string) => served.includes(name)), specs.join(', ')).toBe(true);
    for (const name of ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc', 'vllm:cache_config_info', 'vllm:lora_requests_info']) expect(served).toContain(name);
  });
});

describe('deploy/Containerfile', () => {
  const lines = readFileSync(join(ROOT, 'deploy/Containerfile'), 'utf8').split('\n');

  it('copies files that exist from the build context, and runs the server entry point', () => {
    const copied = lines.filter((l) => /^COPY (?!--from)/.test(l)).flatMap((l) => l.split(/\s+/).slice(1, -1));
    expect(copied.length).toBeGreaterThan(0);
    for (const path of copied) expect(existsSync(join(ROOT, path)), path).toBe(true);
    const entry = JSON.parse(lines.find((l) => l.startsWith('ENTRYPOINT '))!.slice('ENTRYPOINT '.length)) as string[];
    expect(entry).toEqual(['node', 'bin/mlxcel-server.js']);
    const cmd = JSON.parse(lines.find((l) => l.startsWith('CMD '))!.slice('CMD '.length)) as string[];
    expect(parseCli(cmd, {}, 'unused').kind).toBe('serve');
  });
});
