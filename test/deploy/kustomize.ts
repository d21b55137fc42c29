import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';

/**
 * The part of kustomize that deploy/k8s uses, so CI can render it without the kustomize binary (no
 * registry or Go toolchain for it on the CI machines): resources (files and directories),
 * components, namespace, labels (metadata only), images, replicas and strategic-merge patches from
 * files. Any other field fails loudly, so the manifests cannot start using a feature this renderer
 * would silently skip.
 */

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; [k: string]: unknown };
  [k: string]: unknown;
}

interface Kustomization {
  apiVersion?: string;
  kind?: string;
  resources?: string[];
  components?: string[];
  namespace?: string;
  labels?: { pairs: Record<string, string>; includeSelectors?: boolean; includeTemplates?: boolean }[];
  images?: { name: string; newName?: string; newTag?: string }[];
  replicas?: { name: string; count: number }[];
  patches?: { path: string }[];
}

const SUPPORTED = new Set([
  'apiVersion',
  'kind',
  'resources',
  'components',
  'namespace',
  'labels',
  'images',
  'replicas',
  'patches',
]);
const CLUSTER_SCOPED = new Set([
  'Namespace',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
]);

export interface Rendered {
  objects: K8sObject[];
  /** Every file the render read (kustomizations, resources, patches), absolute. */
  files: Set<string>;
}

export function readYaml(path: string): unknown[] {
  return parseAllDocuments(readFileSync(path, 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${path}: ${d.errors[0]!.message}`);
    return d.toJS();
  });
}

export function render(dir: string, files = new Set<string>()): Rendered {
  const kfile = join(dir, 'kustomization.yaml');
  if (!existsSync(kfile)) throw new Error(`${dir}: no kustomization.yaml`);
  files.add(resolve(kfile));
  const k = readYaml(kfile)[0] as Kustomization;
  for (const key of Object.keys(k))
    if (!SUPPORTED.has(key))
      throw new Error(`${kfile}: field ${key} is not supported by test/deploy/kustomize.ts`);

  const objects: K8sObject[] = [];
  const load = (entry: string) => {
    const path = resolve(dir, entry);
    if (statSync(path).isDirectory()) objects.push(...render(path, files).objects);
    else {
      files.add(path);
      for (const doc of readYaml(path)) if (doc) objects.push(doc as K8sObject);
    }
  };
  for (const r of k.resources ?? []) load(r);
  // A component adds its resources and applies its own transformations to everything so far.
  for (const c of k.components ?? []) {
    const comp = render(resolve(dir, c), files);
    objects.push(...comp.objects);
  }

  for (const l of k.labels ?? []) {
    if (l.includeSelectors || l.includeTemplates)
      throw new Error(`${kfile}: labels with includeSelectors/includeTemplates are not supported`);
    for (const o of objects) o.metadata.labels = { ...o.metadata.labels, ...l.pairs };
  }
  for (const p of k.patches ?? []) {
    const path = resolve(dir, p.path);
    files.add(path);
    for (const patch of readYaml(path) as K8sObject[]) {
      const target = objects.find((o) => o.kind === patch.kind && o.metadata.name === patch.metadata.name);
      if (!target) throw new Error(`${path}: no ${patch.kind}/${patch.metadata.name} to patch`);
      strategicMerge(target, patch);
    }
  }
  for (const r of k.replicas ?? []) {
    const target = objects.find(
      (o) => ['Deployment', 'StatefulSet'].includes(o.kind) && o.metadata.name === r.name,
    );
    if (!target) throw new Error(`${kfile}: replicas for unknown workload ${r.name}`);
    (target.spec as Record<string, unknown>).replicas = r.count;
  }
  for (const img of k.images ?? []) {
    for (const c of containersOf(objects)) {
      const [name, tag] = splitImage(c.image);
      if (name !== img.name) continue;
      c.image = `${img.newName ?? name}${img.newTag ? `:${img.newTag}` : tag ? `:${tag}` : ''}`;
    }
  }
  if (k.namespace)
    for (const o of objects) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  return { objects, files };
}

function splitImage(image: string): [string, string | undefined] {
  const at = image.lastIndexOf(':');
  return at > image.lastIndexOf('/') ? [image.slice(0, at), image.slice(at + 1)] : [image, undefined];
}

export interface Container {
  name: string;
  image: string;
  [k: string]: unknown;
}

/** The pod spec of a workload (Deployment, DaemonSet, StatefulSet, Job), if it has one. */
export function podSpecOf(o: K8sObject): Record<string, unknown> | undefined {
  const spec = o.spec as { template?: { spec?: Record<string, unknown> } } | undefined;
  return spec?.template?.spec;
}

export function containersOf(objects: K8sObject[]): Container[] {
  return objects.flatMap((o) => {
    const pod = podSpecOf(o);
    if (!pod) return [];
    return [...((pod.initContainers as Container[]) ?? []), ...((pod.containers as Container[]) ?? [])];
  });
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Strategic merge as kustomize does it for the shapes used here: maps merge, lists of named maps merge by name, other lists are replaced. */
export function strategicMerge(target: Record<string, unknown>, patch: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(patch)) {
    const cur = target[key];
    if (isObject(cur) && isObject(value)) strategicMerge(cur, value);
    else if (
      Array.isArray(cur) &&
      Array.isArray(value) &&
      value.every((v) => isObject(v) && typeof v.name === 'string')
    ) {
      for (const item of value as Record<string, unknown>[]) {
        const match = (cur as Record<string, unknown>[]).find((c) => isObject(c) && c.name === item.name);
        if (match) strategicMerge(match, item);
        else cur.push(item);
      }
    } else target[key] = value;
  }
}
