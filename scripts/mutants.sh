#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# mutants.sh - a small mutation runner for the test suite. Each mutant is a
# one-place change a real bug could make, found by its text rather than by
# file and line, so the list stays valid when code moves between files. For
# each one the tree is rebuilt (-DECC_CUDA=OFF) in a scratch copy and the
# whole suite is run; a mutant is killed when a test fails. The real tree is
# only read.
#
# Usage: scripts/mutants.sh [--rev REV] [--only ID,ID...] [--list FILE] [--dir DIR] [--check]
#   --rev REV   mutate the tree of commit REV (default: the working tree as it is)
#   --only      run only these mutants
#   --list      read the mutants from FILE instead of the list below
#   --dir       scratch directory (default /tmp/ecc-mutants-<uid>); emptied first
#   --check     only check that every pattern occurs exactly once; build nothing
# Exit status: 0 when every mutant was killed, 1 when one survived or its
# pattern was not found exactly once, 2 when the unmutated tree fails.
#
# A mutant is one line: ID @@ GLOB @@ FROM @@ TO. GLOB names files relative
# to the repository root (bash globbing); FROM must occur exactly once across
# them and is replaced by TO. "\n" in FROM or TO stands for a line break.
set -euo pipefail
# The shim refuses INI files and plugins in directories others may write.
umask 022

root="$(cd "$(dirname "$0")/.." && pwd)"
rev=""
only=""
list=""
dir="/tmp/ecc-mutants-$(id -u)"
check_only=0
while [ $# -gt 0 ]; do
  case "$1" in
  --rev) rev="$2"; shift 2 ;;
  --only) only=",$2,"; shift 2 ;;
  --list) list="$2"; shift 2 ;;
  --dir) dir="$2"; shift 2 ;;
  --check) check_only=1; shift ;;
  -h | --help) sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "mutants.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

builtin_list() {
  cat <<'EOF'
# The shared-memory plugin: what poll reports for each entry.
elapsed-not-kept @@ core/*.c @@ t->elapsed_ns = elapsed; @@ (void)elapsed;
elapsed-not-reported @@ core/*.c @@ out->elapsed_ns = t->elapsed_ns; @@
elapsed-absolute @@ core/engine/engine_host.c @@ *elapsed_ns = j->end_ns - atomic_load(&j->start_ns); @@ *elapsed_ns = j->end_ns;
host-copy-unguarded @@ core/engine/engine_host.c @@ guard->env = &env; @@ guard->env = NULL;
host-copy-guard-any-address @@ core/engine/engine_host.c @@ at >= guard->lo && at < guard->hi @@ at != 0
region-dead-builder-waited-out @@ core/region/region.c @@ rc = watch_builder(out, watch, log); @@ rc = STEP_ABSENT;
region-memcg-loosest-limit @@ core/region/region.c @@ if (out->limited && room >= out->room) @@ if (out->limited && room <= out->room)
trust-pipe-not-found @@ common/trust.c @@ return unresolved(path, want_folder, what, why, why_cap); @@ return errtext_fail(why, why_cap, TRUST_MISSING, "%s %s not found", what, path);
batch-from-zero @@ core/*.c @@ t->batch = ++c->save_batches; @@ t->batch = c->save_batches++;
batch-not-incremented @@ core/*.c @@ t->batch = ++c->load_batches; @@ t->batch = c->load_batches + 1;
batch-one-counter @@ core/*.c @@ t->batch = ++c->load_batches; @@ t->batch = ++c->save_batches;
batch-not-reported @@ core/*.c @@ out->batch = t->batch; @@
nbytes-of-batch @@ core/*.c @@ out->nbytes = rec->nbytes; @@ out->nbytes = t->view.desc.bytes;
load-nbytes-capacity @@ core/*.c @@ rec[i].nbytes = bytes; @@ rec[i].nbytes = e[i].dst_capacity;
direction-fixed @@ core/*.c @@ out->direction = (uint32_t)t->view.direction; @@ out->direction = ECC_DIR_SAVE;
save-transfer-id @@ core/*.c @@ out->transfer_id = 0; @@ out->transfer_id = rec->id;
load-key-stale @@ core/*.c @@ out->key[0] = '\0'; @@
region-dead-not-reported @@ core/poll.c @@ t->status = ECC_ERR_REGION;\n    inflight_counts @@ inflight_counts
order-in-batch @@ core/*.c @@ size_t i = t->next_report++; @@ size_t i = t->n_done - 1 - t->next_report++;
loads-overwrite-saves @@ core/poll.c @@ n += drain(c, &c->inflight.loads, out + n, cap - n, &p); @@ n += drain(c, &c->inflight.loads, out, cap - n, &p);
loads-before-saves @@ core/poll.c @@ size_t n = drain(c, &c->inflight.saves, out, cap, &p);\n  n += drain(c, &c->inflight.loads, out + n, cap - n, &p); @@ size_t n = drain(c, &c->inflight.loads, out, cap, &p);\n  n += drain(c, &c->inflight.saves, out + n, cap - n, &p);
# Stats.
hist-edge @@ core/*.c @@ bytes >= bounds[b] @@ bytes > bounds[b]
hist-by-first-entry @@ core/inflight.c @@ s->hist[inflight_hist_bucket(d->bytes)]++; @@ s->hist[inflight_hist_bucket(t->done[0].nbytes)]++;
busy-not-summed @@ core/*.c @@ s->busy_ns += t->elapsed_ns; @@ s->busy_ns = t->elapsed_ns;
transfers-as-entries @@ core/*.c @@ s->transfers++;\n  s->entries += t->n_done; @@ s->transfers += t->n_done;\n  s->entries += t->n_done;
entries-as-transfers @@ core/*.c @@ s->entries += t->n_done; @@ s->entries++;
descriptors-as-entries @@ core/*.c @@ s->descriptors += d->count; @@ s->descriptors += t->n_done;
bytes-as-entries @@ core/*.c @@ s->bytes += d->bytes; @@ s->bytes += t->n_done;
dead-region-not-failed @@ core/poll.c @@ inflight_counts(&c->inflight, t->view.direction)->failed++; @@ (void)t;
skipped-per-call @@ core/inflight.c @@ c->inflight.stats.saves_skipped += n; @@ c->inflight.stats.saves_skipped++;
save-rank-ignores-pcp @@ core/*.c @@ c->save_rank = cfg->tp_rank == 0 && cfg->pcp_rank == 0; @@ c->save_rank = cfg->tp_rank == 0;
# describe.
describe-creator @@ core/*.c @@ info.creator = (uint32_t)c->region.creator; @@ info.creator = (uint32_t)c->save_rank;
describe-save-rank @@ core/*.c @@ info.save_rank = (uint32_t)c->save_rank; @@ info.save_rank = (uint32_t)c->region.creator;
describe-pinned @@ core/*.c @@ info.pinned = (uint32_t)c->engine.pinned; @@ info.pinned = (uint32_t)c->save_rank;
describe-max-inflight @@ core/*.c @@ info.max_inflight = c->cfg.max_inflight; @@ info.max_inflight = c->cfg.max_sms;
describe-region-bytes @@ core/*.c @@ info.region_bytes = c->region.map_bytes; @@ info.region_bytes = c->region.block_size * c->region.num_blocks;
describe-role @@ core/*.c @@ snprintf(info.role, sizeof(info.role), "%s", config_role_name(c->cfg.role)); @@ snprintf(info.role, sizeof(info.role), "%s", config_role_name(ROLE_BOTH));
describe-path @@ core/*.c @@ snprintf(info.region_path, sizeof(info.region_path), "%s", c->region.path); @@ snprintf(info.region_path, sizeof(info.region_path), "%s", c->region.file);
# Configuration: published defaults, closed sets, names.
default-join-timeout @@ core/config/config.c @@ {"region.join_timeout_ms", "30000", @@ {"region.join_timeout_ms", "3000",
default-host-threads @@ core/config/config.c @@ {"engine.host_threads", "0", @@ {"engine.host_threads", "1",
default-max-inflight @@ core/config/config.c @@ {"connector.max_inflight", "64", @@ {"connector.max_inflight", "32",
method-names @@ core/config/config.c @@ return choice_name(methods, N_OF(methods), method); @@ return choice_name(engines, N_OF(engines), method);
engine-names @@ core/config/config.c @@ return choice_name(engines, N_OF(engines), engine); @@ return choice_name(methods, N_OF(methods), engine);
dtype-bytes @@ core/config/config.c @@ c->block_size = (uint64_t)h * (uint64_t)per; @@ c->block_size = (uint64_t)h * 2;
tmpfs-into-reap @@ core/config/config.c @@ "region.require_tmpfs", &c->require_tmpfs, @@ "region.require_tmpfs", &c->reap_orphans,
# The plugin's table.
caps-without-stats @@ plugins/shm/plugin.c @@ ECC_CAP_STATS | ECC_CAP_DIRECTORY | @@ ECC_CAP_DIRECTORY |
params-one-short @@ plugins/shm/plugin.c @@ .n_params = CONFIG_N_PARAMS, @@ .n_params = CONFIG_N_PARAMS - 1,
# The host library, eccctl and the shipped templates.
log-level-shifted @@ host-shim/*.c @@ return (int)i; @@ return (int)i + 1;
template-role @@ conf/producer.ini @@ role = producer @@ role = consumer
strerror-shifted @@ host-shim/*.c @@ {name, #name ": " text}, @@ {name - 1, #name ": " text},
info-pinned @@ host-shim/cli/*.c @@ info.pinned ? "yes" : "no" @@ info.save_rank ? "yes" : "no"
info-max-inflight @@ host-shim/cli/*.c @@ info.max_inflight); @@ info.num_blocks);
demo-stats-direction @@ host-shim/cli/*.c @@ direction == ECC_DIR_SAVE ? &st.save : &st.load @@ &st.save
dir-claim-not-exclusive @@ core/directory/directory.c @@ else if (rc == ECC_OK && e->claimed)\n    rc = errtext_fail(why, why_cap, ECC_ERR_BUSY, @@ else if (false)\n    rc = errtext_fail(why, why_cap, ECC_ERR_BUSY,
dir-blocks-unchecked @@ core/block_claims.c @@ int rc = dir_hold_blocks(&c->dir, ids, n, t->holds + t->n_holds, &got, &bad, why, sizeof(why)); @@ int rc = ECC_OK;
dir-block-load-holds-nothing @@ core/block_claims.c @@ int rc = dir_hold_blocks(&c->dir, ids, n, t->holds + t->n_holds, &got, &bad, why, sizeof(why)); @@ int rc = dir_blocks_held(&c->dir, ids, n, true, &bad);
dir-block-load-hold-kept @@ core/poll.c @@ release_holds(c, t, p); @@ (void)p;
dir-load-keeps-its-pin @@ core/settle.c @@ : dir_unpin(d, token_pin_ref(ref), NULL, 0); @@ : ECC_OK;
dir-block-save-holds-nothing @@ core/block_claims.c @@ rc = claim_found(c, t, &w, e); @@ rc = t != NULL ? ECC_OK : claim_found(c, t, &w, e);
dir-block-save-any-owner @@ core/block_claims.c @@ bool writable = e->state == DIR_STATE_RESERVED && e->owner.pid == w->self.pid &&\n                  e->owner.start_ticks == w->self.start_ticks; @@ bool writable = e->state == DIR_STATE_RESERVED;
dir-token-kind-ignored @@ core/tokens.h @@ return ((low & TOKEN_PIN_BIT) != 0) == (kind == TOKEN_PIN) ? TOKEN_NAMES : TOKEN_OTHER_KIND; @@ return TOKEN_NAMES;
dir-region-unchecked @@ core/internal.h @@ return directory_code(region_check(&c->region, &c->log)); @@ return directory_code(ECC_OK);
dir-settles-a-cut-directory @@ core/poll.c @@ c->inflight.dir_gone = !settle_reachable(&c->region); @@ c->inflight.dir_gone = false;
dir-ranks-unbounded @@ core/directory_calls.c @@ if (rc == ECC_OK && ranks > ECC_RANKS_MAX) @@ if (false)
dir-abort-published-invalid @@ core/directory_calls.c @@ if (rc == ECC_ERR_INVALID) /* published: no longer a reservation */ @@ if (false)
dir-generations-from-zero @@ core/directory/directory.c @@ sh->instance = new_instance(mem);\n  seed_generations(sh); @@ sh->instance = new_instance(mem);
dir-ref-runs-unchecked @@ core/directory/directory.c @@ if (!slot_valid(sh, e))\n    return slot_damaged(sh, ref.slot, why, cap); @@ if (false)\n    return slot_damaged(sh, ref.slot, why, cap);
dir-lookup-runs-unchecked @@ core/directory/directory.c @@ if (s != NO_SLOT && !runs_valid(sh, slot_at(sh, s)))\n      return slot_damaged(sh, s, why, cap);\n    need @@ if (false)\n      return slot_damaged(sh, s, why, cap);\n    need
dir-gaps-not-used @@ core/directory/directory.c @@ *in_gap = gap_take(sh, q->n_blocks, &runs[0].first); @@ *in_gap = false;
dir-sweep-forgets-passed-runs @@ core/directory/directory.c @@ for (uint32_t i = 0; i < w->n; i++)\n    gap_note(sh, w->free[i].first, w->free[i].count); @@ for (uint32_t i = 0; i < w->n; i++)\n    (void)sh;
# The cross-host plugin.
ucx-foreign-release @@ plugins/ucx/server.c @@ if (ss != NULL && group_held(s, ss, token, &owner) != NULL && release_one(owner, token)) @@ if (ss != NULL && (group_held(s, ss, token, &owner), true))
ucx-layout-unchecked @@ plugins/ucx/server.c @@ if (h->layout_hash != s->layout_hash) { @@ if (false) {
ucx-no-watchdog @@ plugins/ucx/client.c @@   watch_pulls(user); @@   (void)user;
ucx-gone-client-keeps-pins @@ plugins/ucx/server.c @@     drop_session(s, ss); @@     (void)ss;
ucx-kept-copy-not-written @@ plugins/ucx/client.c @@     memcpy(local + done, data + done, n); @@     (void)local;
ucx-groups-ignored @@ plugins/ucx/server.c @@ return b->peer != NULL && b->welcomed && a->group_id != 0 && b->group_id == a->group_id; @@ return false && a && b;
ucx-pins-dropped-not-handed-over @@ plugins/ucx/server.c @@ (void)hand_over(s, ss); @@ (void)s;
ucx-wrong-secret-admitted @@ plugins/ucx/gate.c @@ if (key != NULL && !mac_equal(want, pr.mac)) { @@ if (false) {
ucx-name-unresolved @@ plugins/ucx/ucx_config.c @@   rc = resolve_address(&u, err, err_cap); @@   rc = (strcpy(u.addr, u.host), ECC_OK);
ucx-gone-peers-kept @@ plugins/ucx/net.c @@ for (unsigned i = 0; n->p.server && i < k; i++)\n    peer_free(n, closing[i]); @@ for (unsigned i = 0; n->p.server && i < k; i++)\n    (void)closing[i];
ucx-client-pins-unbounded @@ plugins/ucx/server.c @@ } else if (ss != NULL && ss->n_held + q->n_keys > s->max_pins) { @@ } else if (false) {
ucx-ranks-unbounded @@ plugins/ucx/server.c @@ if (q->ranks > ECC_RANKS_MAX) { @@ if (false) {
dir-new-entry-unmarked @@ core/directory/directory.c @@ hand passes it once before it may be evicted. */\n  e->marked = 1; @@ hand passes it once before it may be evicted. */\n  e->marked = 0;
# The cache of ABI 1.2.
type-untyped-any-bytes @@ core/directory_calls.c @@ bool same = tensor_untyped(have) ? bytes == info->nbytes : tensor_equal(want, have); @@ bool same = tensor_untyped(have) || tensor_equal(want, have);
reserve-ex-type-unchecked @@ core/cache_calls.c @@ if (rc == ECC_OK && args->nbytes > 0)\n    rc = check_reserved_type(c, args); @@ if (rc == ECC_OK && args->nbytes > 0)\n    rc = ECC_OK;
wait-writer-always-gone @@ core/directory/directory.c @@ if (reservation_stale(d, e, now, fresh)) {\n    reclaim_entry(sh, s);\n    return ECC_OK; @@ if (true) {\n    reclaim_entry(sh, s);\n    return ECC_OK;
remove-told-as-eviction @@ core/directory/directory.c @@ note_event(sh, e, ECC_EVENT_REMOVED); @@ note_event(sh, e, ECC_EVENT_EVICTED);
peek-counts-a-hit @@ core/directory/directory.c @@ out->hits = e->hits;\n  out->meta = e->meta;\n}\n\nint dir_peek @@ out->hits = e->hits;\n  out->meta = e->meta;\n  ((struct dir_shared *)sh)->lookups++;\n}\n\nint dir_peek
policy-cost-blind @@ core/directory/directory.c @@ bool kept = sh->policy == DIR_POLICY_COST ? policy_keeps(e->credit) : e->marked != 0; @@ bool kept = e->marked != 0;
policy-uses-ignored @@ core/directory/policy.c @@ uint64_t total = (uses < POLICY_CREDIT_MAX ? uses : POLICY_CREDIT_MAX) * one; @@ uint64_t total = one;
policy-credit-never-spent @@ core/directory/policy.c @@ return spend_all || credit < POLICY_QUANTUM ? 0 : credit - POLICY_QUANTUM; @@ return spend_all ? 0 : credit;
policy-cost-per-entry @@ core/directory/policy.c @@ return (cost_us << FIXED_SHIFT) / (n_blocks > 0 ? n_blocks : 1); @@ return (cost_us << FIXED_SHIFT) / (n_blocks > 0 ? 1 : 1);
policy-pinned-evictable @@ core/directory/directory.c @@ if (e->pins > 0)\n    return OCC_HELD;\n  bool kept @@ bool kept
claim-of-dead-writer-kept @@ core/directory/directory.c @@ if (e->claimed && !owner_alive(d, &e->writer, ecc_now_ns(), true)) { @@ if (e->claimed && false) {
# The range check's four lanes at a time.
range-lanes-ignored @@ core/block_calls.c @@ over |= (ids_x4)(four >= lims); @@ (void)four;
# A load written in parts while its first parts are copied.
seal-ignored @@ core/engine/descriptors.h @@ if (w->count > w->sealed && s == w->src_end && d == w->dst_end) {\n      w->len[w->count - 1] += n; @@ if (w->count > 0 && s == w->src_end && d == w->dst_end) {\n      w->len[w->count - 1] += n;
feed-parts-of-one-entry @@ core/load_plan.h @@ if (w->bytes >= goal)\n      break; @@ if (w->bytes >= 0)\n      break;
EOF
}

mutant_lines() {
  if [ -n "$list" ]; then cat "$list"; else builtin_list; fi | grep -v '^[[:space:]]*\(#\|$\)'
}

src="$dir/src"
pristine="$dir/pristine"
build="$dir/build"
logs="$dir/logs"

# The tree to mutate: a commit, or the working tree's tracked and
# untracked-but-not-ignored files.
export_tree() {
  # The build goes too: the tree keeps its files' times, older than objects
  # an earlier run built from a mutant, which the build would then keep.
  rm -rf "$src" "$pristine" "$logs" "$build"
  mkdir -p "$src" "$logs"
  if [ -n "$rev" ]; then
    git -C "$root" archive --format=tar "$rev" | tar -x --no-same-permissions -C "$src"
  else
    (cd "$root" && git ls-files -z -co --exclude-standard |
      tar --null --ignore-failed-read -T - -cf - 2>/dev/null) |
      tar -x --no-same-permissions -C "$src"
  fi
  cp -a "$src" "$pristine"
}

# Occurrences of $FROM across the files matching $1 in $src, left in
# `found`, and the files holding them in the array `hits`.
count_in() {
  local glob="$1" f k
  found=0
  hits=()
  shopt -s nullglob
  # shellcheck disable=SC2206 # the glob is meant to expand
  local files=($glob)
  shopt -u nullglob
  for f in "${files[@]}"; do
    k=$(perl -0ne '$c += () = /\Q$ENV{FROM}\E/g; END { print $c + 0 }' "$f")
    if [ "$k" -gt 0 ]; then
      hits+=("$f")
      found=$((found + k))
    fi
  done
}

unescape() {
  printf '%s' "${1//\\n/$'\n'}"
}

trim() {
  local s="$1"
  s="${s#"${s%%[![:space:]]*}"}"
  printf '%s' "${s%"${s##*[![:space:]]}"}"
}

run_suite() {
  (cd "$build" && timeout --kill-after=30 1200 ctest -j2 --stop-on-failure >"$1" 2>&1)
}

failed_tests() {
  local f="$build/Testing/Temporary/LastTestsFailed.log"
  if [ -s "$f" ]; then cut -d: -f2 "$f" | paste -sd, -; else echo "?"; fi
}

export_tree
cd "$src"
if [ "$check_only" -eq 0 ]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  echo "mutants.sh: building the unmutated tree in $build"
  cmake -S "$src" -B "$build" "${gen[@]}" -DECC_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$logs/configure.log" 2>&1 ||
    { echo "mutants.sh: cmake failed: $logs/configure.log" >&2; exit 2; }
  cmake --build "$build" -j"$(nproc)" >"$logs/build.log" 2>&1 ||
    { echo "mutants.sh: the unmutated tree does not build: $logs/build.log" >&2; exit 2; }
  run_suite "$logs/suite.log" ||
    { echo "mutants.sh: the unmutated tree fails its tests: $logs/suite.log" >&2; exit 2; }
fi

results="$dir/results.txt"
: >"$results"
killed=0 survived=0 invalid=0 checked=0
start=$SECONDS
while IFS= read -r line; do
  id=$(trim "${line%% @@ *}")
  rest="${line#* @@ }"
  glob=$(trim "${rest%% @@ *}")
  rest="${rest#* @@ }"
  from=$(trim "${rest%% @@*}")
  to=""
  [[ "$rest" == *" @@ "* ]] && to=$(trim "${rest#* @@ }")
  [ -n "$only" ] && [[ "$only" != *",$id,"* ]] && continue
  FROM=$(unescape "$from")
  TO=$(unescape "$to")
  export FROM TO
  count_in "$glob"
  if [ "$found" -ne 1 ]; then
    verdict="invalid (found $found times in $glob)"
    invalid=$((invalid + 1))
  elif [ "$check_only" -eq 1 ]; then
    verdict="ok (${hits[0]})"
    checked=$((checked + 1))
  else
    file="${hits[0]}"
    perl -0pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$file"
    t0=$SECONDS
    if ! cmake --build "$build" -j"$(nproc)" >"$logs/$id.build.log" 2>&1; then
      verdict="invalid (does not build: $logs/$id.build.log)"
      invalid=$((invalid + 1))
    elif run_suite "$logs/$id.log"; then
      verdict="SURVIVED ($file, $((SECONDS - t0)) s)"
      survived=$((survived + 1))
    else
      verdict="killed by $(failed_tests) ($file, $((SECONDS - t0)) s)"
      killed=$((killed + 1))
    fi
    cp "$pristine/$file" "$file" # a new time: the next build compiles it again
  fi
  printf '%-26s %s\n' "$id" "$verdict" | tee -a "$results"
done < <(mutant_lines)

if [ "$check_only" -eq 1 ]; then
  echo "mutants.sh: $((checked + invalid)) patterns: $checked found once, $invalid not" |
    tee -a "$results"
else
  echo "mutants.sh: $((killed + survived + invalid)) mutants: $killed killed, $survived survived," \
    "$invalid invalid ($((SECONDS - start)) s; results in $results)" | tee -a "$results"
fi
[ "$survived" -eq 0 ] && [ "$invalid" -eq 0 ]
