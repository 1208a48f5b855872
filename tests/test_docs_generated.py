"""The site's reference pages are generated from the code (docs/generate.py): the committed
pages must be what the generator writes now, as tests/test_architecture_doc.py does for the
diagram."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_page_is_the_code_s() -> None:
    pages = generator().render()
    stale = [name for name, text in pages.items()
             if not (REPO / "docs" / "reference" / name).is_file()
             or (REPO / "docs" / "reference" / name).read_text() != text]
    assert stale == [], (f"stale: {', '.join(f'docs/reference/{n}' for n in stale)}: run "
                         "`python docs/generate.py` and commit the pages")


def test_nothing_else_lives_in_the_generated_folder() -> None:
    written = set(generator().PAGES)
    assert {p.name for p in (REPO / "docs" / "reference").iterdir()} == written


def test_the_pages_carry_what_the_loaders_and_parsers_hold() -> None:
    from rig.bench import config
    from rig.qubo import sweep

    gen = generator()
    bench = gen.bench_page()
    for dotted, words in config.CHOICES.items():
        assert ", ".join(f"`{w}`" for w in words) in bench, dotted
    assert "| `voltage_limit_v` | number | V | in (0, 60] | required |" in bench
    assert "| `sample_rate_hz` | number | Hz | in (0, 10000000] | `1000.0` |" in bench
    assert all(f"| `{k}` |" in gen.sweep_page() for k in sweep.SWEEP_KEYS)
    commands = gen.commands_page()
    assert "## rig measure {#rig-measure}" in commands
    assert "#### rig model train xylo {#rig-model-train-xylo}" in commands
    assert "| `--scope {all,performance,energy,accuracy}` |" in commands
    assert gen.protocol_page().endswith((REPO / "protocols" / "dut" / "SPEC.md").read_text())
