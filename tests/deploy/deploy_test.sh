#!/usr/bin/env bash
# Checks the operator's kit in deploy/ offline, with whichever of promtool, jq, yamllint
# and kubectl are installed (each part that lacks its tool says so and is skipped):
#   - promtool: the alert rules parse, their unit tests pass, both Prometheus
#     configurations load, and every query of the Grafana dashboard parses;
#   - jq: the dashboard's structure (data source input, variables, unique panel ids);
#   - yamllint: every YAML file of deploy/ (and the adapter's embedded configuration);
#   - kubectl: every Kubernetes manifest parses and decodes into the API's types, and the
#     manifests agree with each other (grace period covers preStop and the drain, /dev/shm
#     is memory-backed and fits the memory limit, the HPA's metric is the adapter's, the
#     Service selects the Deployment's pods and port);
#   - no tool: every hearth_* metric the kit names is one hearth exports.
# Exits 0 when every part that ran passed, 1 on a failure (with the tool's output), and
# 77 when none of the tools is installed.
#   tests/deploy/deploy_test.sh [SOURCE_DIR]
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
DEPLOY=$ROOT/deploy
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

failed=0
tools_ran=0

pass() { echo "ok:   $1"; }
skip() { echo "skip: $1"; }
fail() {
  echo "FAIL: $1"
  # shellcheck disable=SC2001  # indents every line of the output
  [ -z "${2:-}" ] || sed 's/^/      /' <<<"$2"
  failed=1
}
have() { command -v "$1" >/dev/null 2>&1; }
# check WHAT CMD...: runs CMD, passing or failing WHAT with its output.
check() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then pass "$what"; else fail "$what" "$out"; fi
}

# The metrics hearth exports (frontend /metrics), by Prometheus name; histograms without
# their _bucket/_sum/_count suffixes.
known_metrics=(
  hearth_http_requests_total hearth_prompt_tokens_total hearth_generation_tokens_total
  hearth_request_success_total hearth_requests_rejected_total hearth_num_preemptions_total
  hearth_engine_steps_total hearth_engine_up hearth_num_requests_running hearth_num_requests_waiting
  hearth_kv_cache_usage_perc hearth_build_info hearth_prefix_cache_queries_total hearth_prefix_cache_hits_total
  hearth_time_to_first_token_seconds hearth_time_per_output_token_seconds
  hearth_inter_token_latency_seconds hearth_e2e_request_latency_seconds hearth_request_queue_time_seconds
)

# ---- Prometheus rules and configurations -------------------------------------------------
if have promtool; then
  tools_ran=1
  check "promtool check rules prometheus/hearth-alerts.yml" promtool check rules "$DEPLOY/prometheus/hearth-alerts.yml"
  # promtool resolves rule_files relative to the file it reads.
  check "promtool test rules prometheus/hearth-alerts_test.yml" promtool test rules "$DEPLOY/prometheus/hearth-alerts_test.yml"
  check "promtool check config prometheus/prometheus.yml" promtool check config "$DEPLOY/prometheus/prometheus.yml"
  if out=$(promtool check config "$DEPLOY/prometheus/prometheus-kubernetes.yml" 2>&1); then
    pass "promtool check config prometheus/prometheus-kubernetes.yml"
  elif grep -q 'field kubernetes_sd_configs not found' <<<"$out"; then
    # Debian's prometheus package is built without Kubernetes service discovery.
    skip "prometheus/prometheus-kubernetes.yml: this promtool has no kubernetes_sd_configs"
  else
    fail "promtool check config prometheus/prometheus-kubernetes.yml" "$out"
  fi
else
  skip "Prometheus rules and configurations: promtool is not installed"
fi

# ---- Grafana dashboard ---------------------------------------------------------------------
dashboard=$DEPLOY/grafana/hearth-dashboard.json
if have jq; then
  tools_ran=1
  # shellcheck disable=SC2016  # ${DS_PROMETHEUS} is the dashboard's own text, not the shell's
  check "grafana/hearth-dashboard.json: structure" jq -e '
      (.schemaVersion >= 36)
      and (.__inputs | any(.name == "DS_PROMETHEUS" and .pluginId == "prometheus"))
      and (.templating.list | any(.name == "model_name"))
      and ([.panels[].id] | length == (unique | length))
      and (.panels | length > 0)
      and all(.panels[]; (.targets | length > 0) and .datasource.uid == "${DS_PROMETHEUS}")
      and all(.panels[].targets[]; .datasource.uid == "${DS_PROMETHEUS}" and (.expr | length > 0))' "$dashboard"
  if have promtool; then
    # Every query as a recording rule, with Grafana's variables replaced by what they
    # expand to: intervals by a duration, the template variables by a match-all regex.
    jq '[.. | objects | select(has("expr")) | .expr]
        | to_entries
        | map({record: "dashboard_query_\(.key)",
               expr: (.value
                      | gsub("\\$__rate_interval|\\$__interval|\\$__range"; "5m")
                      | gsub("\\$\\{?[A-Za-z_][A-Za-z0-9_]*\\}?"; ".*"))})
        | {groups: [{name: "hearth-dashboard", rules: .}]}' "$dashboard" >"$tmp/dashboard-rules.yml"
    check "grafana/hearth-dashboard.json: $(jq '.groups[0].rules | length' "$tmp/dashboard-rules.yml") queries parse" \
      promtool check rules "$tmp/dashboard-rules.yml"
  else
    skip "dashboard queries: promtool is not installed"
  fi
else
  skip "Grafana dashboard: jq is not installed"
fi

# ---- YAML style ----------------------------------------------------------------------------
if have yamllint; then
  tools_ran=1
  check "yamllint deploy/" yamllint --strict -c "$DEPLOY/.yamllint" "$DEPLOY"
else
  skip "YAML style: yamllint is not installed"
fi

# ---- Kubernetes manifests ------------------------------------------------------------------
# kubectl's own dry runs (apply/create --dry-run=client) ask the API server for its types
# first, so they need a cluster. Offline, `--local` commands still read each object and
# decode it into the Kubernetes API structs; `set subject` applies to none of the kinds here,
# so it decodes every object (a wrong type fails there) and then declines it.
to_bytes() {  # QUANTITY (Ki, Mi, Gi, Ti or plain bytes) -> bytes
  local n=${1%[KMGT]i} unit=${1#"${1%[KMGT]i}"}
  [[ $n =~ ^[0-9]+$ ]] || return 1
  case $unit in
    "") echo "$n" ;;
    Ki) echo $((n << 10)) ;;
    Mi) echo $((n << 20)) ;;
    Gi) echo $((n << 30)) ;;
    Ti) echo $((n << 40)) ;;
  esac
}

if have kubectl; then
  tools_ran=1
  export KUBECONFIG=$tmp/kubeconfig  # never the caller's cluster
  printf 'apiVersion: v1\nkind: Config\n' >"$KUBECONFIG"
  kq() {  # FILE JSONPATH: the JSONPath of each object of FILE, read offline; empty if unreadable
    kubectl annotate --local --dry-run=client -f "$1" deploy-test=1 -o "jsonpath=$2" 2>/dev/null || true
  }

  manifests=("$DEPLOY"/kubernetes/*.yaml)
  for f in "${manifests[@]}"; do
    name=kubernetes/${f##*/}
    if ! out=$(kubectl annotate --local --dry-run=client -f "$f" deploy-test=1 -o name 2>&1); then
      fail "$name: kubectl reads it" "$out"
      continue
    fi
    # A message may go on over indented lines: join them to the line they continue.
    out=$(kubectl set subject --local --dry-run=client -o name -f "$f" --user=deploy-test 2>&1 |
      sed -e ':a' -e 'N' -e '$!ba' -e 's/\n / /g' || true)
    errors=$(grep '^error:' <<<"$out" | grep -v 'setting subjects is only supported for RoleBinding/ClusterRoleBinding' || true)
    if [ -z "$errors" ]; then
      pass "$name: decodes into the Kubernetes API types"
    elif grep -q 'no kind ".*" is registered for version' <<<"$errors" && [ "$(wc -l <<<"$errors")" -eq 1 ]; then
      pass "$name: parses (a custom resource: its type is known only to its cluster)"
    else
      fail "$name: decodes into the Kubernetes API types" "$errors"
    fi
  done

  service=$DEPLOY/kubernetes/service.yaml
  svc_app=$(kq "$service" '{.spec.selector.app}')
  svc_port=$(kq "$service" '{.spec.ports[0].targetPort}')
  for f in "$DEPLOY"/kubernetes/deployment*.yaml; do
    name=kubernetes/${f##*/}
    pod='.spec.template.spec'
    c="$pod.containers[0]"
    problems=()
    grace=$(kq "$f" "{$pod.terminationGracePeriodSeconds}")
    pre_stop=$(kq "$f" "{$c.lifecycle.preStop.exec.command[*]}")
    sleep_s=${pre_stop##* }
    drain_ms=$(kq "$f" "{range $c.args[*]}{@}{\"\\n\"}{end}" | awk 'prev == "--drain-timeout" { print } { prev = $0 }')
    if ! [[ $grace =~ ^[0-9]+$ && $sleep_s =~ ^[0-9]+$ && $drain_ms =~ ^[0-9]+$ ]]; then
      problems+=("needs terminationGracePeriodSeconds ('$grace'), a preStop sleep ('$pre_stop') and --drain-timeout ('$drain_ms')")
    elif ((grace * 1000 <= sleep_s * 1000 + drain_ms)); then
      problems+=("terminationGracePeriodSeconds $grace does not cover the preStop sleep ${sleep_s}s plus --drain-timeout ${drain_ms}ms")
    fi
    [ "$(kq "$f" "{$c.livenessProbe.httpGet.path}")" = /health ] || problems+=("the livenessProbe must ask /health")
    [ "$(kq "$f" "{$c.readinessProbe.httpGet.path}")" = /ready ] || problems+=("the readinessProbe must ask /ready")
    shm_volume=$(kq "$f" "{$c.volumeMounts[?(@.mountPath==\"/dev/shm\")].name}")
    shm_medium=$(kq "$f" "{$pod.volumes[?(@.name==\"$shm_volume\")].emptyDir.medium}")
    shm_size=$(kq "$f" "{$pod.volumes[?(@.name==\"$shm_volume\")].emptyDir.sizeLimit}")
    memory=$(kq "$f" "{$c.resources.limits.memory}")
    if [ -z "$shm_volume" ] || [ "$shm_medium" != Memory ] || [ -z "$shm_size" ]; then
      problems+=("/dev/shm must be an emptyDir with medium Memory and a sizeLimit")
    elif ! shm_bytes=$(to_bytes "$shm_size") || ! memory_bytes=$(to_bytes "$memory"); then
      problems+=("cannot compare the /dev/shm sizeLimit '$shm_size' with the memory limit '$memory'")
    elif ((memory_bytes <= shm_bytes)); then
      problems+=("the memory limit $memory must exceed the /dev/shm sizeLimit $shm_size (the pod's memory holds both)")
    fi
    device=$(kq "$f" "{range $c.args[*]}{@}{\"\\n\"}{end}" | awk 'prev == "--device" { print } { prev = $0 }')
    gpus=$(kq "$f" "{$c.resources.limits.nvidia\\.com/gpu}")
    if [[ $device == cuda* && -z $gpus ]]; then
      problems+=("--device $device without an nvidia.com/gpu limit")
    elif [[ $device != cuda* && -n $gpus ]]; then
      problems+=("an nvidia.com/gpu limit without --device cuda")
    fi
    [ "$(kq "$f" '{.spec.template.metadata.labels.app}')" = "$svc_app" ] ||
      problems+=("its pods do not carry the Service's selector app=$svc_app")
    [ -n "$(kq "$f" "{$c.ports[?(@.name==\"$svc_port\")].containerPort}")" ] ||
      problems+=("no container port named '$svc_port' (the Service's targetPort)")
    if ((${#problems[@]})); then
      fail "$name: consistent" "$(printf '%s\n' "${problems[@]}")"
    else
      pass "$name: consistent (grace ${grace}s > preStop ${sleep_s}s + drain ${drain_ms}ms; /dev/shm $shm_size of $memory)"
    fi
  done

  hpa=$DEPLOY/kubernetes/hpa.yaml
  adapter=$DEPLOY/kubernetes/prometheus-adapter-rules.yaml
  kq "$adapter" '{.data.config\.yaml}' >"$tmp/adapter-config.yaml"
  hpa_metric=$(kq "$hpa" '{.spec.metrics[?(@.type=="Pods")].pods.metric.name}')
  hpa_target=$(kq "$hpa" '{.spec.scaleTargetRef.kind}/{.spec.scaleTargetRef.name}')
  deployments=$(for f in "$DEPLOY"/kubernetes/deployment*.yaml; do kq "$f" '{.kind}/{.metadata.name}{"\n"}'; done)
  if [ -z "$hpa_metric" ] || ! grep -q "as: \"$hpa_metric\"" "$tmp/adapter-config.yaml"; then
    fail "kubernetes/hpa.yaml: its Pods metric '$hpa_metric' is one prometheus-adapter-rules.yaml serves"
  elif ! grep -qx "$hpa_target" <<<"$deployments"; then
    fail "kubernetes/hpa.yaml: scales $hpa_target, which no deployment*.yaml defines"
  else
    pass "kubernetes/hpa.yaml: scales $hpa_target on $hpa_metric, served by the adapter rule"
  fi
  if have yamllint; then
    check "kubernetes/prometheus-adapter-rules.yaml: embedded config.yaml" \
      yamllint --strict -c "$DEPLOY/.yamllint" "$tmp/adapter-config.yaml"
  fi
else
  skip "Kubernetes manifests: kubectl is not installed"
fi

# ---- Metric names --------------------------------------------------------------------------
unknown=$(grep -ohE '\bhearth_[a-z0-9_]+' "$DEPLOY"/prometheus/*.yml "$dashboard" "$DEPLOY"/kubernetes/*.yaml |
  sed -E 's/_(bucket|sum|count)$//' | sort -u | grep -vxF -f <(printf '%s\n' "${known_metrics[@]}") || true)
if [ -n "$unknown" ]; then
  fail "metric names: deploy/ names metrics hearth does not export" "$unknown"
else
  pass "metric names: every hearth_* metric named in deploy/ is one hearth exports"
fi

if ((failed)); then
  echo "deploy_test: FAILED"
  exit 1
elif ((!tools_ran)); then
  echo "deploy_test: skipped: none of promtool, jq, yamllint, kubectl is installed"
  exit 77
fi
echo "deploy_test: passed"
