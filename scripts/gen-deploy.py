#!/usr/bin/env python3
"""gen-deploy.py - the Kubernetes manifests of one collection, made from its pipeline file,
or of a fleet of collections, made from a directory of pipeline files.

    python3 scripts/gen-deploy.py PIPELINE.toml --image REGISTRY/rsagg@sha256:DIGEST \\
        [--mode batch|follow] [--schedule CRON] [--serve] [--no-monitor] \\
        [--store-namespace NS | --store-cidr CIDR] [--store-port PORT] \\
        [--format yaml|json] [-o FILE]
    python3 scripts/gen-deploy.py PIPELINES_DIR --image REGISTRY/rsagg@sha256:DIGEST \\
        --shards N [--name FLEET] [--max-pipelines M] [--schedule CRON] [--serve] ...

Reads the pipeline file (TOML, Python's standard library only) and writes, for its collection
NAME (`[collection] name`):

- ConfigMap `rsagg-pipeline-NAME`: the pipeline file itself, byte for byte, mounted at
  /etc/rsagg/pipelines/NAME.toml;
- the writer, exactly one: `--mode batch` (default) a CronJob `rsagg-run-NAME` running
  `rsagg run NAME.toml --once` on `--schedule`; `--mode follow` a Deployment
  `rsagg-follow-NAME` (1 replica, Recreate) running `rsagg run NAME.toml --follow --listen
  0.0.0.0:8080 --probe-listen 0.0.0.0:8081` and its Service (the WebSub callbacks, /metrics);
- with `--serve`: a Deployment `rsagg-serve-NAME` (2 replicas) running `rsagg serve`, its
  Service and PodDisruptionBudget;
- NetworkPolicy `rsagg-NAME`: every pod of the collection may reach DNS, the store (a
  namespace and port, or a CIDR) and the public internet on the ports of its upstreams and hub
  (private, loopback and link-local ranges excluded, as rsagg's own guard does), and takes no
  connections; NetworkPolicy `rsagg-NAME-http` (follow or serve only): port 8080 of the
  listening pods is open (the Ingress, the hub's deliveries, Prometheus); port 8081 of the
  listening pods (`--probe-listen`: /healthz and /readyz only, with connections of their own
  so a flood of 8080 cannot starve them) is for the kubelet's probes, from the node, and is
  opened to no one else;
- PodMonitor `rsagg-NAME` (Prometheus Operator; follow or serve only, unless `--no-monitor`):
  /metrics of the listening pods.

Given a directory (every `*.toml` in it, one collection each), it writes the fleet FLEET
(`--name`, default `fleet`) instead:

- ConfigMaps `rsagg-fleet-FLEET-K` (K from 0): the pipeline files, byte for byte, as many
  ConfigMaps as needed to keep each under Kubernetes' 1 MiB, projected together at
  /etc/rsagg/pipelines/;
- CronJob `rsagg-fleet-FLEET`: on `--schedule`, an Indexed Job (`completionMode: Indexed`,
  `completions` = `parallelism` = `--shards` N) whose pod I runs `rsagg run
  /etc/rsagg/pipelines --once --shards N --max-pipelines M`: rsagg takes I from
  JOB_COMPLETION_INDEX and runs the pipelines that hash to shard I (each exactly once per
  schedule); `backoffLimitPerIndex` retries one shard, and exit 2 or 3 fails that index only;
- with `--serve`: Deployment `rsagg-serve-FLEET` running `rsagg serve /etc/rsagg/pipelines`;
- NetworkPolicies and PodMonitor as for one collection, named after FLEET, the egress ports
  those of every pipeline.

The pods read the store settings and credentials from the ConfigMap `rsagg-env` and the Secret
`rsagg-s3` of deploy/k8s (see deploy/README.md), so `${VAR}`s of the pipeline file must be keys
of `rsagg-env`. The image must be pinned by digest (`NAME@sha256:…`, as `podman push
--digestfile` reports it): a tag can point at other bytes tomorrow. `--format json` writes one
`v1` List instead of YAML documents (what the tests read). Exit 2 on a usage or pipeline error.
"""

import argparse
import ipaddress
import json
import os
import re
import sys
import tomllib
from urllib.parse import urlsplit

LISTEN_PORT = 8080
# `--probe-listen`: the liveness and readiness probes' own listener (not in the Services).
PROBE_PORT = 8081
# What rsagg's address guard refuses (crates/fetch/src/guard.rs), excluded from the egress to
# upstreams: the cluster's own pods and services are not upstreams.
PRIVATE_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.168.0.0/16"]
PRIVATE_V6 = ["fc00::/7", "fe80::/10"]
DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
# A DNS-1123 label short enough for `rsagg-follow-NAME` (Deployment pods) and `rsagg-run-NAME`
# (CronJob names are limited to 52 characters).
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")


class Usage(Exception):
    pass


def labels(name, component):
    return {
        "app.kubernetes.io/name": "rsagg",
        "app.kubernetes.io/part-of": "rsagg",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "gen-deploy",
    }


def selector(name, component):
    return {
        "app.kubernetes.io/name": "rsagg",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/instance": name,
    }


def meta(obj_name, name, component):
    return {"name": obj_name, "labels": labels(name, component)}


def pod_spec(name, image, args, grace, listening, volume=None):
    """The pod of every rsagg container: non-root, read-only root, the pipeline mounted (or
    `volume`, the fleet's projected ConfigMaps)."""
    container = {
        "name": "rsagg",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "envFrom": [{"configMapRef": {"name": "rsagg-env"}}, {"secretRef": {"name": "rsagg-s3"}}],
        "resources": {
            "requests": {"cpu": "100m" if listening else "500m", "memory": "128Mi" if listening else "256Mi"},
            "limits": {"cpu": "1" if listening else "2", "memory": "512Mi" if listening else "1Gi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "pipelines", "mountPath": "/etc/rsagg/pipelines", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if listening:
        container["ports"] = [{"name": "http", "containerPort": LISTEN_PORT, "protocol": "TCP"},
                              {"name": "probes", "containerPort": PROBE_PORT, "protocol": "TCP"}]
        container["livenessProbe"] = {
            "httpGet": {"path": "/healthz", "port": PROBE_PORT},
            "periodSeconds": 20, "timeoutSeconds": 5, "failureThreshold": 3,
        }
        container["readinessProbe"] = {
            "httpGet": {"path": "/readyz", "port": PROBE_PORT},
            "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3,
        }
    return {
        "terminationGracePeriodSeconds": grace,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            volume or {"name": "pipelines", "configMap": {"name": f"rsagg-pipeline-{name}"}},
            # Temporary files of dump packages, up to dump_package_bytes each.
            {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}},
        ],
    }


def service(name, component):
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(f"rsagg-{component}-{name}", name, component),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(name, component),
            "ports": [{"name": "http", "port": LISTEN_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def cronjob(name, image, schedule):
    pod_labels = labels(name, "batch")
    spec = pod_spec(name, image, ["run", f"/etc/rsagg/pipelines/{name}.toml", "--once"], 60, False)
    # podFailurePolicy requires Never: every retry is a new pod, counted by the Job.
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": meta(f"rsagg-run-{name}", name, "batch"),
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            # Never two writers of one pipeline (a second fences the first: exit 3).
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": 21600,
                    "ttlSecondsAfterFinished": 86400,
                    "podFailurePolicy": {"rules": [
                        # Config error (2) or fenced out (3): a retry cannot succeed.
                        {"action": "FailJob", "onExitCodes": {
                            "containerName": "rsagg", "operator": "In", "values": [2, 3]}},
                        {"action": "Ignore", "onPodConditions": [
                            {"type": "DisruptionTarget", "status": "True"}]},
                    ]},
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec},
                },
            },
        },
    }


def follow(name, image):
    args = ["run", f"/etc/rsagg/pipelines/{name}.toml", "--follow", "--listen", f"0.0.0.0:{LISTEN_PORT}",
            "--probe-listen", f"0.0.0.0:{PROBE_PORT}"]
    return [{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta(f"rsagg-follow-{name}", name, "follow"),
        "spec": {
            # The only writer of the pipeline: one pod, the old one gone before the new starts.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector(name, "follow")},
            "template": {
                "metadata": {"labels": labels(name, "follow")},
                "spec": pod_spec(name, image, args, 60, True),
            },
        },
    }, service(name, "follow")]


def serve(name, image, path=None, volume=None):
    args = ["serve", path or f"/etc/rsagg/pipelines/{name}.toml", "--listen", f"0.0.0.0:{LISTEN_PORT}",
            "--probe-listen", f"0.0.0.0:{PROBE_PORT}"]
    return [{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta(f"rsagg-serve-{name}", name, "serve"),
        "spec": {
            # Readers never fence the writer: scale them with the traffic.
            "replicas": 2,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": selector(name, "serve")},
            "template": {
                "metadata": {"labels": labels(name, "serve")},
                "spec": pod_spec(name, image, args, 30, True, volume),
            },
        },
    }, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(f"rsagg-serve-{name}", name, "serve"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector(name, "serve")}},
    }, service(name, "serve")]


VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def url_port(url):
    """The TCP port of `url`, `${VAR:-default}` read as its default (as the pipeline loader
    does without VAR); None when a variable without default leaves it unknown (80 and 443
    are open anyway)."""
    url = VAR.sub(lambda m: m.group(2) if m.group(2) is not None else "\0", url)
    if "\0" in url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Usage(f"{url}: not an http(s) URL")
    return parts.port or (443 if parts.scheme == "https" else 80)


def egress_ports(pipeline):
    """TCP ports of the upstreams, their Capability Lists and the hub; 80 and 443 always (a
    Source Description may name its Capability Lists on another scheme, redirects may too)."""
    ports = {80, 443}
    for up in pipeline.get("upstream", []):
        for u in [up.get("url", "")] + list(up.get("capability_lists", [])):
            if u:
                ports.add(url_port(u))
    hub = pipeline.get("notify", {}).get("hub")
    if hub:
        ports.add(url_port(hub))
    return sorted(ports - {None})


def network_policies(name, pipeline, listening, store, ports=None):
    part = {"app.kubernetes.io/instance": name, "app.kubernetes.io/part-of": "rsagg"}
    dns = {
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    if store["cidr"]:
        store_peer = {"ipBlock": {"cidr": store["cidr"]}}
    else:
        store_peer = {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": store["namespace"]}}}
    store_rule = {"to": [store_peer], "ports": [{"protocol": "TCP", "port": store["port"]}]}
    public = {
        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE_V4}},
               {"ipBlock": {"cidr": "::/0", "except": PRIVATE_V6}}],
        "ports": [{"protocol": "TCP", "port": p} for p in (ports or egress_ports(pipeline))],
    }
    out = [{
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": meta(f"rsagg-{name}", name, "network"),
        "spec": {
            "podSelector": {"matchLabels": part},
            # Ingress listed without rules: nothing connects to these pods but through the
            # policy below.
            "policyTypes": ["Ingress", "Egress"],
            "egress": [dns, store_rule, public],
        },
    }]
    if listening:
        out.append({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(f"rsagg-{name}-http", name, "network"),
            "spec": {
                "podSelector": {"matchLabels": part, "matchExpressions": [{
                    "key": "app.kubernetes.io/component", "operator": "In", "values": listening}]},
                "policyTypes": ["Ingress"],
                # The Ingress controller, the hub's deliveries (follow), Prometheus.
                "ingress": [{"ports": [{"protocol": "TCP", "port": LISTEN_PORT}]}],
            },
        })
    return out


def pod_monitor(name, listening):
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": meta(f"rsagg-{name}", name, "monitoring"),
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "rsagg", "app.kubernetes.io/instance": name},
                "matchExpressions": [{
                    "key": "app.kubernetes.io/component", "operator": "In", "values": listening}],
            },
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "60s"}],
        },
    }


def generate(text, args):
    try:
        pipeline = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise Usage(f"{args.pipeline}: not TOML: {e}") from e
    name = pipeline.get("collection", {}).get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise Usage(f"{args.pipeline}: [collection] name {name!r} is not a lowercase DNS label "
                    "of at most 40 characters (it names the Kubernetes objects)")
    if not pipeline.get("upstream"):
        raise Usage(f"{args.pipeline}: no [[upstream]]")
    if not DIGEST.match(args.image):
        raise Usage(f"--image {args.image!r} is not pinned by digest (NAME@sha256:<64 hex>)")
    for up in pipeline["upstream"]:
        if up.get("allow_private"):
            print(f"gen-deploy: upstream {up.get('name')!r} allows private addresses, which the "
                  "NetworkPolicy's egress excludes: add its address range to rsagg-"
                  f"{name}'s egress", file=sys.stderr)
    objects = [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(f"rsagg-pipeline-{name}", name, "config"),
        "data": {f"{name}.toml": text},
    }]
    listening = []
    if args.mode == "batch":
        objects.append(cronjob(name, args.image, args.schedule))
    else:
        objects.extend(follow(name, args.image))
        listening.append("follow")
    if args.serve:
        objects.extend(serve(name, args.image))
        listening.append("serve")
    store = {"namespace": args.store_namespace, "cidr": args.store_cidr, "port": args.store_port}
    objects.extend(network_policies(name, pipeline, listening, store))
    if listening and not args.no_monitor:
        objects.append(pod_monitor(name, listening))
    return objects


# --- a fleet: a directory of pipeline files, one Indexed Job --------------------------------

# Bytes of pipeline files per ConfigMap: Kubernetes refuses objects over 1 MiB (etcd's limit;
# JSON escapes of the text count too),
# so a large fleet's files are spread over several ConfigMaps, projected into one directory.
CONFIGMAP_BUDGET = 700 * 1024
# A ConfigMap key (the file's name in the pod).
KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
FLEET_DIR = "/etc/rsagg/pipelines"


def load_dir(path):
    """[(file name, text, parsed)] of the directory's *.toml files, in name order."""
    names = sorted(n for n in os.listdir(path)
                   if n.endswith(".toml") and os.path.isfile(os.path.join(path, n)))
    if not names:
        raise Usage(f"{path}: no *.toml pipeline file")
    out = []
    for n in names:
        if not KEY.match(n) or len(n) > 253:
            raise Usage(f"{path}/{n}: the file name is not a ConfigMap key ([-._a-zA-Z0-9]+)")
        with open(os.path.join(path, n), encoding="utf-8") as f:
            text = f.read()
        try:
            pipeline = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise Usage(f"{path}/{n}: not TOML: {e}") from e
        if not pipeline.get("upstream"):
            raise Usage(f"{path}/{n}: no [[upstream]]")
        if len(text.encode()) > CONFIGMAP_BUDGET:
            raise Usage(f"{path}/{n}: larger than a ConfigMap may hold")
        out.append((n, text, pipeline))
    return out


def fleet_cronjob(name, image, schedule, shards, max_pipelines, volume):
    pod_labels = labels(name, "fleet")
    args = ["run", FLEET_DIR, "--once", "--shards", str(shards), "--max-pipelines", str(max_pipelines)]
    spec = pod_spec(name, image, args, 60, False, volume)
    spec["restartPolicy"] = "Never"
    # A worker's memory is bounded by --max-pipelines (each pipeline's state open at once),
    # not by the number of pipelines.
    spec["containers"][0]["resources"]["limits"]["memory"] = f"{512 + 256 * max_pipelines}Mi"
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": meta(f"rsagg-fleet-{name}", name, "fleet"),
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            # Never two writers of one pipeline: a shard of the next Job would fence the same
            # pipelines of this one (exit 3).
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    # Pod I gets JOB_COMPLETION_INDEX=I: rsagg runs shard I of N.
                    "completionMode": "Indexed",
                    "completions": shards,
                    "parallelism": shards,
                    # Retries per shard: one failing shard does not use up the others'.
                    "backoffLimitPerIndex": 2,
                    "activeDeadlineSeconds": 21600,
                    "ttlSecondsAfterFinished": 86400,
                    "podFailurePolicy": {"rules": [
                        # An invalid pipeline file (2) or a fenced pipeline (3) in this shard:
                        # a retry cannot mend it; the other shards go on.
                        {"action": "FailIndex", "onExitCodes": {
                            "containerName": "rsagg", "operator": "In", "values": [2, 3]}},
                        {"action": "Ignore", "onPodConditions": [
                            {"type": "DisruptionTarget", "status": "True"}]},
                    ]},
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec},
                },
            },
        },
    }


def generate_fleet(path, args):
    name = args.name
    if not NAME.match(name):
        raise Usage(f"--name {name!r} is not a lowercase DNS label of at most 40 characters")
    if args.shards is None or args.shards < 1:
        raise Usage("a directory of pipelines needs --shards N (N >= 1): the Indexed Job's pods")
    if args.mode != "batch":
        raise Usage("a directory of pipelines is run as an Indexed Job (--mode batch); follow one "
                    "collection per Deployment")
    if args.max_pipelines < 1:
        raise Usage("--max-pipelines must be at least 1")
    if not DIGEST.match(args.image):
        raise Usage(f"--image {args.image!r} is not pinned by digest (NAME@sha256:<64 hex>)")
    files = load_dir(path)
    ports = {80, 443}
    for n, _, pipeline in files:
        ports.update(egress_ports(pipeline))
        for up in pipeline["upstream"]:
            if up.get("allow_private"):
                print(f"gen-deploy: {n}: upstream {up.get('name')!r} allows private addresses, "
                      f"which the NetworkPolicy's egress excludes: add its address range to "
                      f"rsagg-{name}'s egress", file=sys.stderr)
    chunks, size = [[]], 0
    for n, text, _ in files:
        b = len(text.encode()) + len(n)
        if chunks[-1] and size + b > CONFIGMAP_BUDGET:
            chunks.append([])
            size = 0
        chunks[-1].append((n, text))
        size += b
    objects = [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(f"rsagg-fleet-{name}-{k}", name, "config"),
        "data": dict(chunk),
    } for k, chunk in enumerate(chunks)]
    volume = {"name": "pipelines", "projected": {"sources": [
        {"configMap": {"name": f"rsagg-fleet-{name}-{k}"}} for k in range(len(chunks))]}}
    objects.append(fleet_cronjob(name, args.image, args.schedule, args.shards,
                                 args.max_pipelines, volume))
    listening = []
    if args.serve:
        objects.extend(serve(name, args.image, FLEET_DIR, volume))
        listening.append("serve")
    store = {"namespace": args.store_namespace, "cidr": args.store_cidr, "port": args.store_port}
    objects.extend(network_policies(name, None, listening, store, sorted(p for p in ports if p)))
    if listening and not args.no_monitor:
        objects.append(pod_monitor(name, listening))
    return objects


# --- a small YAML writer: block style, strings quoted as JSON (valid YAML) unless plain-safe --

PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str) and PLAIN.match(v) and v.lower() not in RESERVED:
        return v
    return json.dumps(v, ensure_ascii=False)


def flow(v):
    return json.dumps(v) if isinstance(v, (dict, list)) else scalar(v)


def emit(v, indent, out):
    pad = " " * indent
    if isinstance(v, dict):
        for k, x in v.items():
            key = scalar(k)
            if isinstance(x, str) and "\n" in x:
                # Literal block: the pipeline file as written ("|" keeps the final newline).
                chomp = "" if x.endswith("\n") else "-"
                # An explicit indentation when the text itself starts indented.
                ind = "2" if x.startswith((" ", "\t")) else ""
                out.append(f"{pad}{key}: |{ind}{chomp}")
                out.extend(f"{pad}  {line}" if line else "" for line in x.rstrip("\n").split("\n"))
            elif isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{key}:")
                emit(x, indent + 2, out)
            else:
                # Scalars, and empty maps or lists in flow style ({} and []).
                out.append(f"{pad}{key}: {flow(x)}")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, dict) and x:
                sub = []
                emit(x, indent + 2, sub)
                sub[0] = f"{pad}- {sub[0][indent + 2:]}"
                out.extend(sub)
            elif isinstance(x, list) and x:
                out.append(f"{pad}-")
                emit(x, indent + 2, out)
            else:
                out.append(f"{pad}- {flow(x)}")


def to_yaml(objects, source):
    out = [f"# Made by scripts/gen-deploy.py from {source}; regenerate instead of editing."]
    for o in objects:
        out.append("---")
        emit(o, 0, out)
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pipeline", help="the pipeline file (TOML), or a directory of them (a fleet)")
    p.add_argument("--image", required=True, help="the rsagg image, pinned: NAME@sha256:DIGEST")
    p.add_argument("--mode", choices=["batch", "follow"], default="batch",
                   help="the writer: a CronJob (batch, default) or a follow Deployment")
    p.add_argument("--schedule", default="*/15 * * * *", help="the CronJob's schedule (batch)")
    p.add_argument("--serve", action="store_true", help="also a `rsagg serve` Deployment")
    p.add_argument("--no-monitor", action="store_true", help="no PodMonitor (no Prometheus Operator)")
    p.add_argument("--store-namespace", default="storage",
                   help="namespace of the S3 store's pods (egress), default storage")
    p.add_argument("--store-cidr", help="the store's address range instead (a store outside the cluster)")
    p.add_argument("--store-port", type=int, default=8333, help="the store's port, default 8333")
    p.add_argument("--shards", type=int,
                   help="a directory: the Indexed Job's pods (completions = parallelism = N)")
    p.add_argument("--name", default="fleet", help="a directory: the fleet's name (default fleet)")
    p.add_argument("--max-pipelines", type=int, default=4,
                   help="a directory: pipelines each pod runs at once (its memory bound), default 4")
    p.add_argument("--format", choices=["yaml", "json"], default="yaml")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    args = p.parse_args(argv)
    if args.store_cidr:
        try:
            ipaddress.ip_network(args.store_cidr)
        except ValueError as e:
            p.error(f"--store-cidr: {e}")
    if len(args.schedule.split()) != 5:
        p.error(f"--schedule {args.schedule!r}: five cron fields expected")
    try:
        if os.path.isdir(args.pipeline):
            objects = generate_fleet(args.pipeline, args)
        else:
            if args.shards is not None:
                raise Usage("--shards needs a directory of pipeline files")
            with open(args.pipeline, encoding="utf-8") as f:
                text = f.read()
            objects = generate(text, args)
    except (OSError, Usage) as e:
        print(f"gen-deploy: {e}", file=sys.stderr)
        return 2
    if args.format == "json":
        rendered = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    else:
        rendered = to_yaml(objects, args.pipeline)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(rendered)
    else:
        sys.stdout.write(rendered)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
