#!/usr/bin/env bash
# Installs what the test suite drives besides cargo, when it is missing: mold (a faster
# linker, used when present), redis-server
# (the sandbox backs Redis pods with a real one), the official kubectl (checked against
# the sandbox's Kubernetes API; optional, the machine image usually has it) and the
# `kubernetes-validate` manifest validator, moto (a third-party AWS emulator the AWS
# contract tests run against), the aws CLI and the Kubeflow Pipelines SDK from PyPI.
# Safe to run repeatedly.
# `deps.sh redis` installs only redis-server, python3 and mold, for the main job.
set -euo pipefail
apt_install() {
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# mold, a faster linker (scripts/linker uses it when present): optional, so a
# machine whose packages lack it still gets the rest.
optional=()
command -v mold >/dev/null 2>&1 || optional+=(mold)
if [ $((${#missing[@]} + ${#optional[@]})) -gt 0 ]; then
  echo "installing ${missing[*]} ${optional[*]} (apt)"
  if ! apt_install "${missing[@]}" "${optional[@]}"; then
    echo "could not install ${optional[*]}; linking with the default linker"
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  fi
  # The Debian package starts a system-wide server; the tests start their own.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop redis-server >/dev/null 2>&1 || true; fi
fi
# `deps.sh redis`: only what the main job needs (the sandbox's Redis pods).
[ "${1:-}" = redis ] && exit 0
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "installing kubernetes-validate (pip)"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate 2>&1 | grep -v "Running pip as the 'root' user" || true
  command -v kubernetes-validate >/dev/null 2>&1 || { echo "kubernetes-validate did not install" >&2; exit 1; }
fi
# jsonschema checks SageMaker pipeline definitions against the official schema.
if ! python3 -c 'import jsonschema' >/dev/null 2>&1; then
  echo "installing jsonschema (pip)"
  python3 -m pip install --quiet --disable-pip-version-check jsonschema 2>&1 | grep -v "Running pip as the 'root' user" || true
fi
if ! command -v moto_server >/dev/null 2>&1; then
  echo "installing moto[server] (pip)"
  python3 -m pip install --quiet --disable-pip-version-check 'moto[server]' 2>&1 | grep -v "Running pip as the 'root' user" || true
  # pyenv installs console scripts behind shims that need a rehash to appear.
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
  command -v moto_server >/dev/null 2>&1 || { echo "moto_server did not install" >&2; exit 1; }
fi
if ! command -v aws >/dev/null 2>&1; then
  echo "installing awscli (pip)"
  python3 -m pip install --quiet --disable-pip-version-check awscli 2>&1 | grep -v "Running pip as the 'root' user" || true
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
# The Kubeflow Pipelines SDK compiles stacks/gke-gpu-pipelines/pipeline/pipeline.py;
# its tests compare the output with the checked-in pipeline.yaml, which names the SDK's
# version, so the version is pinned exactly (kfp-server-api: the API's generated models).
kfp_version=2.17.3
if ! python3 -c "import kfp, kfp.kubernetes, kfp_server_api, sys; sys.exit(kfp.__version__ != '$kfp_version')" >/dev/null 2>&1; then
  echo "installing kfp, kfp-kubernetes and kfp-server-api $kfp_version (pip)"
  python3 -m pip install --quiet --disable-pip-version-check "kfp==$kfp_version" "kfp-kubernetes==$kfp_version" "kfp-server-api==$kfp_version" 2>&1 | grep -v "Running pip as the 'root' user" || true
  python3 -c "import kfp, kfp.kubernetes, kfp_server_api" >/dev/null 2>&1 || { echo "kfp did not install" >&2; exit 1; }
fi
