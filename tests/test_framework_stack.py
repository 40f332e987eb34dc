"""A plan for a framework is costed as that framework's stack runs it (export-check cases d06 and t07 of
../shared/tools/export_check: `plan --framework deepspeed --schedule zb-h1` and `--framework torchtitan
--schedule dualpipev` found no layout while the default stack, Megatron-Core, which runs neither schedule,
restricted the search)."""

from __future__ import annotations

import pytest

from parplan.stacks.support import stack_for_framework


@pytest.mark.parametrize(("framework", "stack"), [("megatron", "megatron-core"), ("deepspeed", "megatron-deepspeed"),
                                                 ("torchtitan", "torchtitan"), ("torchtitan@0.2.2", "torchtitan")])
def test_each_framework_names_the_stack_whose_exporter_it_is(framework, stack):
    assert stack_for_framework(framework) == stack


def test_plan_for_deepspeed_runs_zero_bubble_as_megatron_deepspeed(run_json):
    # Megatron-DeepSpeed runs ZB-H1 (its ZeroBubbleH1Pipeline); Megatron-Core does not.
    doc = run_json("plan", "--model", "llama3.1-8b", "--cluster", "h100", "--gpus", "16", "--gbs", "64",
                   "--schedule", "zb-h1", "--framework", "deepspeed")
    best = doc["plans"][0]
    assert best["stack"] == "megatron-deepspeed" and best["strategy"]["schedule"] == "zb-h1"
    assert best["stack_source"] == "megatron-deepspeed"


def test_a_stack_of_another_framework_is_a_usage_error(run_cli):
    code, out, err = run_cli("plan", "--model", "llama3.1-8b", "--cluster", "h100", "--gpus", "8", "--gbs", "64",
                             "--stack", "torchtitan", "--framework", "megatron")
    assert code == 2 and out == "" and "--stack" in err and "megatron-core" in err and "Traceback" not in err
