"""The cell table: intervals only with several seeds, the strongest baseline named, markdown."""

from policies.sim import experiment, report
from tests.sim.test_experiment import BASELINES, result, runs


def summarised(rs):
    return experiment.summarise(experiment.Cell(), rs, baselines=BASELINES, resamples=500)


def test_several_seeds_show_medians_with_intervals_and_name_the_strongest_baseline():
    r = summarised(runs())
    header, rows = report.cell_table(r)
    assert header[1:] == [p.policy for p in r.policies]
    by = {row[0]: row[1:] for row in rows}
    ours = r.summary_of("checkpoint-aware")
    col = header.index("checkpoint-aware") - 1
    e = ours.vs_strongest
    assert by["÷ strongest baseline (kube-workload)"][col] == (
        f"{e.median:.2f} [{e.low:.2f}, {e.high:.2f}]")
    assert by["lost GPU-h"][col].startswith(f"{ours.lost.median:.1f} [")
    text = report.format_cell(r)
    assert "5 seed(s)" in text and "95 % bootstrap interval" in text


def test_one_seed_shows_plain_values_and_no_baseline_shows_a_dash():
    r = summarised([experiment.Run(seed=1, result=result("checkpoint-aware", 3.0, losses=(3.0,)))])
    _, rows = report.cell_table(r)
    by = {row[0]: row[1] for row in rows}
    assert by["lost GPU-h"] == "3.0"
    assert by["÷ strongest baseline (none)"] == "-"
    assert by["loss per eviction p50/p99/max"] == "3.00/3.0/3.0"
    assert "bootstrap" not in report.format_cell(r)


def test_markdown_has_one_row_per_metric_and_a_column_per_policy():
    r = summarised(runs())
    md = report.markdown_cell(r).splitlines()
    header, rows = report.cell_table(r)
    assert len(md) == 2 + len(rows)
    assert all(line.count("|") == len(header) + 1 for line in md)
    assert md[0] == "|  | kube-default | kube-workload | cost-aware | checkpoint-aware |"


def test_plot_range_starts_at_the_first_loss_and_ends_at_the_last():
    a = ((100.0, 0.0), (3600.0, 2.0), (7200.0, 5.0))  # a zero-cost eviction first
    b = ((5400.0, 1.0), (9000.0, 4.0))
    assert report.loss_time_range([a, b]) == (3600.0, 9000.0)
    assert report.loss_time_range([(), ((0.0, 0.0),)]) is None
    assert report.loss_time_range([((600.0, 1.0),)]) == (0.0, 2400.0)
    assert report.loss_time_range([((7200.0, 1.0),), ((7200.0, 3.0),)]) == (5400.0, 9000.0)
