"""The explorer with a mixture-of-experts model, in a real browser against a real ``autopar serve``
(the server, browser and page helpers of test_explorer_browser.py): a MoE preset fills the MoE and
MLA sections of the custom-shape form, a refused MoE field shows its 422 beside it, a custom MoE
search posts what the form shows (the flex dispatcher, the EP overlap and the full-iteration CUDA graph
included), the table has EP
and ETP columns, the time breakdown shows the expert-parallel all-to-all, and the shared URL refills
the form."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _explorer_tests() -> Any:
    spec = importlib.util.spec_from_file_location("_moe_explorer_base", HERE / "test_explorer_browser.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_base = _explorer_tests()
server = _base.server  # module-scoped fixtures: a server and a browser of this module's own
browser = _base.browser
Server, Watch, new_page, column, get_json = _base.Server, _base.Watch, _base.new_page, _base.column, _base.get_json
open_explorer = _base.open_explorer
TIMEOUT_MS = _base.TIMEOUT_MS
TOP = 20

MOE = {"experts": 8, "topk": 2, "expert_ffn": 512, "shared_experts": 1, "shared_expert_ffn": 512,
       "first_dense_layers": 1, "capacity_factor": 1.25, "pad_to_capacity": False,
       "router_load": "force-balanced"}


def test_a_moe_search_in_the_explorer(browser: Any, server: Any) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    watch = Watch()
    context, page = open_explorer(browser, server, watch, loaded="deepseek-v3")

    # A MoE preset: its hint and option name the active parameters; as a custom shape it fills both sections.
    page.get_by_label("Model preset").select_option("deepseek-v3")
    expect(page.locator("#model-preset-hint")).to_contain_text("671.0B params, 37.6B active")
    expect(page.locator("#model-preset-hint")).to_contain_text("256 experts, 8 per token")
    page.get_by_label("Custom shape").check()
    expect(page.get_by_label("MoE layers")).to_be_checked()
    expect(page.get_by_label("Experts", exact=True)).to_have_value("256")
    expect(page.get_by_label("Experts per token")).to_have_value("8")
    expect(page.get_by_label("Expert FFN size")).to_have_value("2048")
    expect(page.get_by_label("Dense first layers")).to_have_value("3")
    expect(page.get_by_label("Shared experts", exact=True)).to_have_value("1")
    expect(page.get_by_label("Token dropping")).to_have_value("dropless")
    expect(page.get_by_label("Capacity factor")).to_be_hidden()
    expect(page.get_by_label("Multi-head latent attention")).to_be_checked()
    expect(page.get_by_label("KV latent rank")).to_have_value("512")
    expect(page.get_by_label("Query latent rank")).to_have_value("1536")
    expect(page.get_by_label("Head dim")).to_have_value("")  # implied by MLA
    expect(page.get_by_label("MTP modules")).to_have_value("1")

    # A tiny custom MoE model without MLA, routed with a capacity factor.
    for label, value in (("Model name", "tiny-moe"), ("Layers", "4"), ("Hidden size", "512"),
                         ("Attention heads", "8"), ("KV heads", ""), ("FFN size", "1024"), ("Vocabulary", "32000"),
                         ("Sequence length", "1024"), ("MTP modules", "0"), ("Experts", "8"),
                         ("Experts per token", "9"), ("Expert FFN size", "512"), ("Dense first layers", "1"),
                         ("Shared experts", "1"), ("Shared experts' FFN size", "512")):
        page.get_by_label(label, exact=True).fill(value)
    page.get_by_label("Multi-head latent attention").uncheck()
    expect(page.get_by_label("KV latent rank")).to_be_hidden()
    page.get_by_label("Token dropping").select_option("padded")  # padding keeps the factor's field
    expect(page.get_by_label("Capacity factor")).to_be_visible()
    page.get_by_label("Token dropping").select_option("dropless")
    expect(page.get_by_label("Capacity factor")).to_be_hidden()
    page.get_by_label("Token dropping").select_option("capacity")
    page.get_by_label("Capacity factor").fill("1.25")
    page.get_by_label("Router load").select_option("force-balanced")
    page.get_by_label("Cluster preset").select_option("dgx-h100")
    page.get_by_label("Nodes", exact=True).fill("1")
    page.get_by_label("Global batch").fill("64")
    page.get_by_label("Framework", exact=True).select_option("megatron")
    page.get_by_label("Top k").fill(str(TOP))

    # More experts per token than experts: the search's SpecError sits beside the field it names.
    page.get_by_role("button", name="Start search").click()
    topk = page.get_by_label("Experts per token")
    expect(topk).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#moe-topk-error")).to_contain_text("more than experts=8")
    expect(topk).to_be_focused()
    topk.fill("2")
    expect(topk).not_to_have_attribute("aria-invalid", "true")
    # The token exchange NVIDIA's recipes run: the flex dispatcher on HybridEP, with the EP overlap.
    page.locator("details.options summary").click()
    page.get_by_label("MoE token dispatcher").select_option("flex-hybridep")
    page.get_by_label("Overlap the expert all-to-all (MoE, Megatron-Core)").check()
    page.get_by_label("CUDA graph").select_option("full-iteration")
    page.get_by_role("button", name="Start search").click()

    page.wait_for_url("**/searches/*")
    search_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#status-sub")).to_contain_text(
        "megatron · flex-hybridep + EP overlap + full-iteration CUDA graph")
    expect(page.locator("#configs-table tbody tr")).to_have_count(TOP, timeout=60_000)
    request = get_json(f"{server.base}/v1/searches/{search_id}")["request"]
    assert request["model"]["shape"]["moe"] == MOE  # what the form showed is what was posted
    assert request["model"]["shape"]["mla"] is None and request["model"]["shape"]["mtp_layers"] == 0
    assert (request["moe_dispatcher"], request["moe_a2a_overlap"], request["cuda_graphs"]) == (
        "flex-hybridep", True, "full-iteration")
    configs = get_json(f"{server.base}/v1/searches/{search_id}/configs")["configs"]
    for c in configs:  # every expert-parallel configuration without expert TP runs the asked dispatcher
        flex = c["config"]["ep"] > 1 and c["config"]["etp"] == 1
        assert c["config"]["moe_dispatcher"] == ("flex-hybridep" if flex else "alltoall"), c["config"]
        graphed = flex and c["config"]["zero_stage"] < 2  # HybridEP's static budget; not Megatron-FSDP
        assert c["config"]["cuda_graphs"] == ("full-iteration" if graphed else "none"), c["config"]
    assert any(c["config"]["cuda_graphs"] == "full-iteration" for c in configs)

    # EP and ETP columns, after CP.
    headers = page.locator("#configs-table thead th").evaluate_all("ths => ths.map(th => th.dataset.key)")
    assert headers[headers.index("cp") + 1: headers.index("cp") + 3] == ["ep", "etp"]
    assert column(page, "ep") == [str(c["config"]["ep"]) for c in configs]
    assert column(page, "etp") == [str(c["config"]["etp"]) for c in configs]

    # The expert-parallel all-to-all in the selected configuration's time breakdown.
    expert = next(c for c in configs if c["config"]["ep"] > 1 and c["prediction"]["time_breakdown_s"]["ep_comm"] > 0)
    page.locator(f"#configs-table tbody tr[data-rank='{expert['rank']}']").click()
    expect(page.locator("#detail-title")).to_have_text(f"Selected: #{expert['rank']}")
    time_bar = page.locator("#detail-body figure.stack").nth(0)
    expect(time_bar.locator(".seg[data-key='ep_comm']")).to_have_count(1)
    expect(page.locator("#detail-body")).to_contain_text("EP all-to-all")

    # Side by side: the EP rows compare the degrees.
    page.get_by_label("Configuration B").select_option(str(expert["rank"]))
    ep_row = page.locator("#compare-body tr", has=page.locator("th", has_text="EP")).first
    expect(ep_row.locator("td.col-b")).to_contain_text(str(expert["config"]["ep"]))
    expect(page.locator("#compare-body .compare-col").nth(1)).to_contain_text(f"ep{expert['config']['ep']}")
    dispatcher_row = page.locator("#compare-body tr", has=page.locator("th", has_text="MoE dispatcher"))
    expect(dispatcher_row.locator("td.col-b")).to_contain_text(expert["config"]["moe_dispatcher"])
    graph_row = page.locator("#compare-body tr", has=page.locator("th", has_text="CUDA graph"))
    expect(graph_row.locator("td.col-b")).to_contain_text(expert["config"]["cuda_graphs"])
    context.close()

    # The shared URL refills the MoE section.
    shared_watch = Watch()
    context, page = new_page(browser, server, shared_watch)
    page.goto(f"{server.base}/searches/{search_id}")
    expect(page.locator("#configs-table tbody tr")).to_have_count(TOP)
    expect(page.get_by_label("Custom shape")).to_be_checked()
    expect(page.get_by_label("MoE layers")).to_be_checked()
    expect(page.get_by_label("Experts", exact=True)).to_have_value("8")
    expect(page.get_by_label("Token dropping")).to_have_value("capacity")
    expect(page.get_by_label("Capacity factor")).to_have_value("1.25")
    expect(page.get_by_label("Router load")).to_have_value("force-balanced")
    expect(page.get_by_label("Multi-head latent attention")).not_to_be_checked()
    expect(page.get_by_label("MoE token dispatcher")).to_have_value("flex-hybridep")
    expect(page.get_by_label("Overlap the expert all-to-all (MoE, Megatron-Core)")).to_be_checked()
    expect(page.get_by_label("CUDA graph")).to_have_value("full-iteration")
    context.close()

    watch.check(allow_console=("status of 422",))
    shared_watch.check()
