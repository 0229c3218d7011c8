"""python scripts/robustness_report.py [--fast] [--junit out.xml]

"Nothing wrong passes silently", measured: runs the project's own robustness tests (the bad-input
tables, the filesystem/cache faults, the secret-marker search, the resume checks, the SIGKILL
tests) with pytest and prints, per kind of fault, how many cases were tried and how many ended as
they must (one `error:` line and exit 2, 0 marker hits, a refused or exact resume, calls summed to
the cache's rows). Negative controls are listed as their own kind. The table it prints is the one
in docs/robustness.md. `--fast` leaves out the SmolLM2 SIGKILL test and the tmpfs disk-full runs
(minutes on a small CPU); `--from-junit FILE` counts from an earlier run's JUnit XML (the whole
suite's) without rerunning.

Every number comes from a test that asserts it; nothing here is counted by hand.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

R6_SILENT = "round 6: silent wrong numbers, lost or replaced results, misleading states"
KINDS = [
    # (kind, test file, test functions: every parametrized case of each counts as one try)
    (
        "bad config values, in process",
        "tests/runtime/test_config_checks.py",
        (
            "test_bad_value_is_one_line_before_any_work",
            "test_a_shipped_config_without_what_it_requires_is_refused_in_one_line",
        ),
    ),
    (
        "bad config values through the CLI",
        "tests/runtime/test_cli_errors.py",
        (
            "test_config_refused_before_any_work",
            "test_bad_config",
            "test_secret_in_config_is_refused",
            "test_context_length_is_checked_when_every_answer_comes_from_the_cache",
        ),
    ),
    ("bad data files through the CLI", "tests/runtime/test_cli_errors.py", ("test_bad_data_file",)),
    (
        "control: every shipped config accepted",
        "tests/runtime/test_config_checks.py",
        ("test_every_shipped_config_passes_the_checks", "test_every_shipped_part_passes_the_checks"),
    ),
    (
        "run directory / input file / cache faults",
        "tests/project/test_fs_faults.py",
        (
            "test_corrupt_cache_is_refused_with_the_command_that_moves_it_aside",
            "test_read_only_cache_is_refused_when_opened_not_at_the_first_commit",
            "test_cache_path_that_cannot_be_a_file",
            "test_invalid_cached_rows_are_asked_again_not_trusted",
            "test_run_directory_that_cannot_be_used",
            "test_unreadable_input_file",
            "test_unreadable_input_file_permission",
            "test_corrupt_cache_through_the_cli_then_moved_aside",
            "test_read_only_cache_through_the_cli",
        ),
    ),
    ("control: undamaged cache opens", "tests/project/test_fs_faults.py", ("test_undamaged_cache_opens",)),
    (
        "secret marker: command-line paths (0 hits)",
        "tests/project/test_secrets_marker.py",
        ("test_secret_on_the_command_line_is_refused_and_written_nowhere",),
    ),
    (
        "secret marker: key in use, logs, W&B argv (0 hits)",
        "tests/project/test_secrets_marker.py",
        (
            "test_key_in_use_reaches_the_server_and_nothing_else",
            "test_rejected_key_is_not_repeated_by_the_error",
            "test_log_records_and_tracebacks_lose_secret_values",
            "test_wandb_sees_a_redacted_command_line",
        ),
    ),
    (
        "control: the marker search finds a written canary",
        "tests/project/test_secrets_marker.py",
        ("test_negative_control_the_search_finds_a_written_canary",),
    ),
    (
        "resume with a changed input (refused, named)",
        "tests/project/test_resume_fingerprint.py",
        ("test_a_changed_input_is_refused_in_one_line_naming_it",),
    ),
    (
        "control: unchanged inputs resume; the cache re-asks only edits",
        "tests/project/test_resume_fingerprint.py",
        (
            "test_unchanged_inputs_resume_and_more_epochs_continue",
            "test_the_edited_candidate_search_is_not_the_old_one",
            "test_judge_cache_serves_unchanged_pairs_and_reasks_edited_ones",
        ),
    ),
    (
        "SIGKILL: exact resume, summed calls = cache rows",
        "tests/runtime/test_attempts.py",
        ("test_killed_attempt_is_counted_and_the_sum_equals_the_cache_rows",),
    ),
    (
        "SIGKILL: exact resume, summed calls = cache rows",
        "tests/zepo/test_zepo_kill.py",
        ("test_sigkilled_zepo_resumes_with_the_unbroken_history_and_no_repeated_call",),
    ),
    (
        "SIGKILL: exact resume, summed calls = cache rows",
        "tests/project/test_run.py",
        ("test_killed_run_resumes_without_rescoring",),
    ),
    (
        "attempts.jsonl: statuses, concurrent appends never interleave",
        "tests/runtime/test_attempts.py",
        ("test_statuses_and_concurrent_appends",),
    ),
    (
        "control: a killed attempt without progress lines is caught",
        "tests/runtime/test_attempts.py",
        ("test_negative_control_without_progress_lines_the_check_sees_missing_calls",),
    ),
    # API answers and transport faults: a real HTTP server on loopback (tests/openai_server.py)
    # injects them into an OpenAI-compatible exchange with the tiny model behind it.
    (
        "API transport faults: retried, every pair answered exactly once",
        "tests/judges/test_api_judge.py",
        ("test_faults_are_survived_and_every_request_is_answered_exactly_once",),
    ),
    (
        "API content faults: refused, asked again, the true score",
        "tests/judges/test_api_judge.py",
        (
            "test_content_faults_are_asked_again_and_answered_once",
            "test_top_mode_content_faults_are_asked_again",
        ),
    ),
    (
        "API faults that persist: one line, or flagged, counted, never cached",
        "tests/judges/test_api_judge.py",
        (
            "test_retries_exhausted_and_client_errors_fail_with_one_clear_line",
            "test_a_persistent_content_fault_is_flagged_counted_in_results_and_never_cached",
        ),
    ),
    (
        "API server never up: one line through the CLI, no results",
        "tests/judges/test_vllm_server.py",
        ("test_a_server_that_never_comes_up_is_one_line_through_the_cli",),
    ),
    # Round 2: the second adversarial run's findings.
    (
        "bad input round 2: one line before any model call (CLI)",
        "tests/project/test_bad_inputs.py",
        ("test_bad_input_is_one_line_before_any_model_call",),
    ),
    (
        "bad input round 2: corrupt ZEPO state.json, failed atomic writes",
        "tests/project/test_bad_inputs.py",
        (
            "test_a_corrupt_state_json_is_one_line_naming_it",
            "test_state_json_as_a_folder_is_one_line_and_leaves_no_temp_file",
            "test_a_failed_atomic_write_leaves_no_temp_file",
        ),
    ),
    (
        "control: the good inputs next to the bad ones pass",
        "tests/project/test_bad_inputs.py",
        (
            "test_negative_control_the_good_inputs_next_to_the_bad_ones_pass",
            "test_negative_control_300_digits_still_load",
            "test_the_character_bound_never_refuses_a_prompt_that_fits",
            "test_negative_control_an_intact_state_json_resumes",
        ),
    ),
    (
        "faults round 2: probe unreadable, calls summed, file modes",
        "tests/project/test_bad_inputs.py",
        (
            "test_an_unreadable_content_free_probe_drops_only_the_contextual_view",
            "test_judge_calls_of_every_attempt_are_summed",
            "test_fetched_data_files_take_the_umask_mode",
        ),
    ),
    (
        "disk full mid-run (real tmpfs): one line, rerun = uninterrupted",
        "tests/project/test_disk_full.py",
        ("test_a_full_disk_is_one_line_and_a_rerun_equals_an_uninterrupted_run",),
    ),
    (
        "control: the same mount with room runs to the end",
        "tests/project/test_disk_full.py",
        ("test_negative_control_the_same_mount_with_room_runs_to_the_end",),
    ),
    (
        "secret marker round 2: multirun, query-string key, misspelt name (0 hits)",
        "tests/project/test_secrets_marker.py",
        ("test_secret_in_a_multirun_is_refused_before_hydra_writes_anything",),
    ),
    (
        "control: a multirun's overrides are found where the search looks",
        "tests/project/test_secrets_marker.py",
        ("test_negative_control_a_multirun_writes_its_overrides_where_the_search_looks",),
    ),
    # Round 3: silently wrong numbers, and loud but wrong answers.
    (
        "round 3: silent wrong numbers through the CLI (NaN judge, overlong context, forged template)",
        "tests/project/test_silent_numbers.py",
        (
            "test_a_judge_whose_logits_are_nan_fails_loudly",
            "test_a_context_longer_than_the_weights_positions_is_refused",
            "test_control_tokens_in_data_stay_text_through_the_cli",
        ),
    ),
    (
        "round 3: the same, in process, with their controls",
        "tests/project/test_silent_numbers.py",
        (
            "test_nan_inf_or_no_mass_is_unreadable",
            "test_metrics_of_no_readable_pair_are_null_not_zero",
            "test_context_length_against_positions",
            "test_control_tokens_in_data_are_text_for_every_tokenizer_family",
            "test_control_tokens_in_data_are_text_for_smollm2",
            "test_a_label_of_several_tokens_is_named_with_its_tokens",
            "test_a_label_with_a_space_is_named_as_such",
        ),
    ),
    (
        "round 3: loud but wrong (top_logprobs, choices, surrogates, run dir, signals, weights, API)",
        "tests/runtime/test_loud_inputs.py",
        (
            "test_top_logprobs_below_the_label_count_is_refused",
            "test_choices_are_read_by_index",
            "test_a_lone_surrogate_is_one_line_naming_file_line_and_field",
            "test_an_empty_run_dir_is_refused_before_hydra",
            "test_sigterm_and_sighup_end_the_attempt_and_exit_143",
            "test_sigint_and_sigterm_are_one_line_without_a_traceback",
            "test_a_broken_weight_file_is_named",
            "test_timeout_bounds_a_whole_attempt_and_redirects_are_refused",
            "test_a_key_interpolated_into_the_run_dir_is_refused_before_any_folder",
        ),
    ),
    # Round 5: silently wrong numbers or lost results, and loud but wrong answers.
    (
        "round 5: silent wrong numbers or lost results (top-K, sweep subdirs, another experiment, repeated pair, "
        "fingerprint)",
        "tests/judges/test_api_judge.py",
        (
            "test_a_label_outside_the_top_k_is_unreadable_not_probability_1_through_the_cli",
            "test_top_mode_reports_missing_variants",
        ),
    ),
    (
        "round 5: silent wrong numbers or lost results (top-K, sweep subdirs, another experiment, repeated pair, "
        "fingerprint)",
        "tests/runtime/test_run_dirs.py",
        (
            "test_a_sweep_subdir_that_is_not_one_per_job_is_refused",
            "test_another_experiment_is_refused_in_an_existing_run_dir",
        ),
    ),
    (
        "round 5: silent wrong numbers or lost results (top-K, sweep subdirs, another experiment, repeated pair, "
        "fingerprint)",
        "tests/report/test_compare.py",
        ("test_a_judgments_file_that_repeats_a_pair_is_refused_naming_file_line_and_pair",),
    ),
    (
        "round 5: silent wrong numbers or lost results (top-K, sweep subdirs, another experiment, repeated pair, "
        "fingerprint)",
        "tests/judges/test_identity.py",
        ("test_an_edit_between_the_samples_of_a_small_model_is_a_new_judge",),
    ),
    (
        "round 5: one line, not a leak or a traceback (secret by name, serve, surrogate, [] results, cache layout)",
        "tests/runtime/test_run_dirs.py",
        ("test_a_secret_that_does_not_look_like_a_key_is_refused_by_its_variables_name",),
    ),
    (
        "round 5: one line, not a leak or a traceback (secret by name, serve, surrogate, [] results, cache layout)",
        "tests/judges/test_vllm_server.py",
        ("test_serve_refuses_a_port_out_of_range_and_a_key_on_the_command_line",),
    ),
    (
        "round 5: one line, not a leak or a traceback (secret by name, serve, surrogate, [] results, cache layout)",
        "tests/runtime/test_loud_inputs.py",
        ("test_a_lone_surrogate_in_zepos_instruction_file_is_one_line_naming_file_and_key",),
    ),
    (
        "round 5: one line, not a leak or a traceback (secret by name, serve, surrogate, [] results, cache layout)",
        "tests/runtime/test_collect.py",
        ("test_a_results_json_that_is_not_an_object_is_one_line",),
    ),
    (
        "round 5: one line, not a leak or a traceback (secret by name, serve, surrogate, [] results, cache layout)",
        "tests/project/test_fs_faults.py",
        ("test_a_cache_of_another_layout_is_refused_when_opened",),
    ),
    (
        "round 5: durable atomic writes; a SIGTERM after the run finished",
        "tests/project/test_fs_faults.py",
        ("test_atomic_writes_fsync_the_file_before_the_rename_and_the_folder_after",),
    ),
    (
        "round 5: durable atomic writes; a SIGTERM after the run finished",
        "tests/runtime/test_loud_inputs.py",
        ("test_a_sigterm_after_the_run_finished_is_no_stop",),
    ),
    (
        "control: round 5's folder and secret checks pass what they must",
        "tests/runtime/test_loud_inputs.py",
        ("test_negative_control_the_default_run_dir_is_made_where_the_command_is_typed",),
    ),
    (
        "control: round 5's folder and secret checks pass what they must",
        "tests/runtime/test_run_dirs.py",
        (
            "test_negative_control_a_subdir_that_differs_per_job_is_accepted",
            "test_negative_control_the_old_check_passed_it_and_a_plain_variable_is_no_secret",
        ),
    ),
    # Round 5: the optimizer's protections through the judges' chat layer; the chat frame.
    (
        "round 5: the optimizer keyed by its weights, its prompt as text, inside its context",
        "tests/zepo/test_optimizer_guards.py",
        (
            "test_other_optimizer_weights_are_asked_and_refused_on_resume",
            "test_an_optimizer_past_its_positions_is_one_line",
            "test_the_reply_counts_against_the_optimizers_context",
            "test_control_tokens_in_the_instruction_stay_text_for_the_optimizer",
            "test_optimizer_and_judge_of_one_model_share_the_weights_identity",
        ),
    ),
    (
        "round 5: system turns without a system role, degenerate logits, the template's own system prompt",
        "tests/judges/test_judge_guards.py",
        (
            "test_a_system_prompt_for_mistral_v01_goes_into_the_first_user_turn",
            "test_a_template_that_refuses_the_prompt_is_one_line",
            "test_a_judge_with_all_logits_equal_fails_loudly",
            "test_a_judge_whose_answer_tokens_always_tie_fails_loudly",
            "test_the_identity_records_the_system_prompt_the_template_adds",
            "test_rows_under_the_identity_before_the_templates_system_prompt_are_asked_again",
        ),
    ),
    # Round 6: the tools around the results (report, collect, merge, compare, bench) and the API optimizer.
    (
        R6_SILENT,
        "tests/zepo/test_optimizers.py",
        ("test_other_served_weights_under_the_same_name_are_another_optimizer",),
    ),
    (
        R6_SILENT,
        "tests/report/test_around_results.py",
        (
            "test_report_out_onto_another_run_is_refused_and_replaces_nothing",
            "test_merge_out_onto_another_run_is_refused",
            "test_a_shard_that_lost_pairs_is_not_merged",
            "test_the_report_says_when_the_data_changed_since_the_run",
            "test_a_results_json_that_is_not_a_runs_record_is_one_line",
            "test_a_sweep_whose_jobs_all_failed_lists_each_job_and_why",
            "test_jobs_outside_the_sweep_folder_are_collected_and_linked",
            "test_the_current_folder_and_an_empty_cache_variable_are_refused",
            "test_a_run_of_too_many_pairs_is_one_line_before_any_work",
        ),
    ),
    (
        R6_SILENT,
        "tests/report/test_data_fingerprint.py",
        ("test_the_report_of_every_experiment_says_when_its_data_changed",),
    ),
    (R6_SILENT, "tests/data/test_own_data.py", ("test_an_empty_score_key_is_one_line_before_any_work",)),
    (
        R6_SILENT,
        "tests/judges/test_api_judge.py",
        ("test_a_token_listed_twice_reads_its_first_entry_on_both_endpoints",),
    ),
    (
        R6_SILENT,
        "tests/runtime/test_attempts.py",
        ("test_a_running_attempt_whose_process_is_gone_is_killed_and_a_bad_file_is_one_line",),
    ),
    (
        "round 6: nothing on a page or in a CSV runs (links, formulas, prototype ids)",
        "tests/report/test_around_results.py",
        (
            "test_a_job_folder_named_like_a_scheme_is_a_relative_link_on_the_sweep_index",
            "test_csv_cells_that_start_like_a_formula_are_text",
            "test_document_ids_named_like_object_properties_keep_the_pair_table",
        ),
    ),
    (
        "round 6: one line, not a traceback (--out, multirun.yaml, seeds and digits, engine-argument types)",
        "tests/report/test_around_results.py",
        (
            "test_report_out_onto_its_own_run_reports_in_place",
            "test_every_out_that_cannot_be_written_is_one_line_before_any_work",
            "test_a_damaged_multirun_yaml_is_one_line",
            "test_a_job_whose_attempts_file_is_not_utf8_is_one_line",
            "test_out_of_range_seeds_and_digits_are_one_line",
            "test_an_engine_argument_of_the_wrong_type_is_one_line_before_any_work",
        ),
    ),
]


SLOW = ("tests/project/test_run.py", "tests/project/test_disk_full.py")
"""Left out by --fast: the SmolLM2 SIGKILL test and the disk-full runs (minutes on a small CPU)."""


def kind_of(file: str, name: str) -> str | None:
    base = name.split("[", 1)[0]
    for kind, f, funcs in KINDS:
        if f == file and base in funcs:
            return kind
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--fast", action="store_true", help="skip the SmolLM2 SIGKILL test and the disk-full runs"
    )
    ap.add_argument("--junit", help="keep pytest's JUnit XML here")
    ap.add_argument(
        "--from-junit",
        type=Path,
        help="count from this JUnit XML of an earlier pytest run (e.g. the whole suite's "
        "`python -m pytest --junitxml=...`) instead of running the tests again",
    )
    args = ap.parse_args()
    if args.from_junit:
        junit = args.from_junit
    else:
        nodes = [f"{f}::{fn}" for _, f, funcs in KINDS for fn in funcs if not (args.fast and f in SLOW)]
        junit = Path(args.junit or tempfile.mkstemp(suffix=".xml")[1])
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *dict.fromkeys(nodes),
        ]
        print("$ python -m pytest", " ".join(cmd[4:]), flush=True)
        subprocess.run(cmd, cwd=REPO)
    tried, passed, skipped = Counter(), Counter(), Counter()
    seen: set[tuple[str, str]] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        kind = kind_of(file, case.get("name", ""))
        if kind is None:
            continue
        seen.add((file, case.get("name", "").split("[", 1)[0]))
        if case.find("skipped") is not None:
            skipped[kind] += 1
            continue
        tried[kind] += 1
        passed[kind] += case.find("failure") is None and case.find("error") is None
    print("\n| kind | tried | passed | skipped |\n|---|---|---|---|")
    for kind in dict.fromkeys(k for k, _, _ in KINDS):
        print(f"| {kind} | {tried[kind]} | {passed[kind]} | {skipped[kind]} |")
    total_t, total_p = sum(tried.values()), sum(passed.values())
    print(f"| **all** | **{total_t}** | **{total_p}** | {sum(skipped.values())} |")
    expected = [(f, fn) for _, f, funcs in KINDS for fn in funcs if not (args.fast and f in SLOW)]
    missing = [f"{f}::{fn}" for f, fn in dict.fromkeys(expected) if (f, fn) not in seen]
    if missing:  # a renamed test or a JUnit file from a partial run: say so rather than count it as fine
        print(f"no test case found for: {', '.join(missing)}", file=sys.stderr)
    sys.exit(0 if total_t == total_p and not missing else 1)


if __name__ == "__main__":
    main()
