import json
import re
import xml.etree.ElementTree as ET

from flashroll import report

RECORDS = [
    {"step": 1, "version": 1, "reward_by_effort": {"50": 0.1, "100": 0.2}, "success": 0.25,
     "success_by_effort": {"50": 0.0, "100": 0.5}, "reasoning_tokens_by_effort": {"50": 80, "100": 200},
     "mismatch_abs": 1e-4, "mismatch_kl": 2e-5, "mismatch_tokens": 300, "tokens_per_s": 900.0, "loss": 0.01,
     "grad_norm": 0.5, "samples": 8, "tokens": 4000, "seconds": 4.4},
    {"step": 2, "version": 2, "reward_by_effort": {"50": 0.3, "100": 0.4}, "success": 0.5,
     "success_by_effort": {"50": 0.25, "100": 0.75}, "reasoning_tokens_by_effort": {"50": 70, "100": 190},
     "mismatch_abs": None, "mismatch_kl": None, "mismatch_tokens": 0, "tokens_per_s": 950.0, "loss": 0.02,
     "grad_norm": 0.4, "samples": 8, "tokens": 4100, "seconds": 4.3},
]
EVAL = {"before": {"success": {"50": 0.1, "100": 0.2}, "reasoning_tokens": {"100": 210}},
        "after": {"success": {"50": 0.3, "100": 0.4}, "reasoning_tokens": {"100": 180}}}


def test_report_is_self_contained_html_with_plots_and_tables(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (tmp_path / "eval.json").write_text(json.dumps(EVAL))
    out = tmp_path / "report.html"
    assert report.main(["--log", str(log), "--eval", str(tmp_path / "eval.json"), "--out", str(out)]) == 0
    page = out.read_text()
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 5
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    polylines = [len(re.findall("<polyline", svg)) for svg in svgs]
    # reward: 2 efforts; success: 2 efforts + all; reasoning: 2; mismatch: 2 series (one point each); tokens/s: 1
    assert polylines == [2, 3, 2, 2, 1]
    assert page.count("<tr>") == (1 + 3) + (1 + 2)  # eval: header + 3 flattened keys; steps: header + 2
    assert "<td>n/a</td>" in page  # step 2's mismatch
    assert "success.100" in page and "reasoning_tokens.100" in page and "<td>180</td>" in page


def test_report_without_eval_and_with_an_empty_series():
    page = report.render([{"step": 1, "mismatch_abs": None}])
    assert "Evaluation" not in page and page.count("no data") == 5
