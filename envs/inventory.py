"""``forkgym/Inventory-v0``: questions about a seeded warehouse database, answered via tools.

Each task draws a small world (products in categories, stocked in warehouses A-C with
quantities and prices) and a question that needs several lookups and some arithmetic. The
tools are ``search_items(category)`` (SKUs, names, warehouses) and ``get_item(sku)`` (the full
record). With ``flaky_rate > 0`` the lookup service sometimes answers "busy, retry"; that
randomness comes from the episode's generator, so two branches that send the same calls see
the same failures, and a fork replays them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .task import Task
from .tool_env import ToolEnv, ToolResult, tool

__all__ = ["InventoryEnv"]

CATALOGUE = {
    "fasteners": ["hex bolt M6", "wood screw 40mm", "wall anchor 8mm", "washer M8", "rivet 4mm"],
    "paint": ["white emulsion 5L", "gloss black 1L", "primer 2.5L", "wood stain 750ml"],
    "cables": ["copper wire 2.5mm", "coax cable 10m", "ethernet cable 5m", "extension lead 3m"],
    "adhesives": ["epoxy 50ml", "wood glue 1L", "silicone sealant", "contact cement 250ml"],
}
WAREHOUSES = ["A", "B", "C"]


def _world(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Stock records: every product of two categories, in one or two warehouses each."""
    chosen = sorted(rng.choice(sorted(CATALOGUE), size=2, replace=False).tolist())
    skus = rng.choice(np.arange(1000, 10000), size=32, replace=False).tolist()
    records = []
    for category in chosen:
        for name in CATALOGUE[category]:
            price = int(rng.integers(50, 5000))
            for warehouse in sorted(
                rng.choice(WAREHOUSES, size=int(rng.integers(1, 3)), replace=False).tolist()
            ):
                records.append({
                    "sku": f"SKU-{skus[len(records)]}", "name": name, "category": category,
                    "warehouse": warehouse, "quantity": int(rng.integers(0, 400)), "unit_price_cents": price,
                })  # fmt: skip
    return records


def _question(
    rng: np.random.Generator, records: list[dict[str, Any]]
) -> tuple[str, int, list[str], str]:
    """(question, answer, SKUs whose records are needed, category to search)."""
    kind = ["units", "value", "low_stock"][int(rng.integers(3))]
    record = records[int(rng.integers(len(records)))]
    category = record["category"]
    if kind == "units":
        needed = [r for r in records if r["name"] == record["name"]]
        return (
            f"How many units of '{record['name']}' are in stock across all warehouses?",
            sum(r["quantity"] for r in needed),
            [r["sku"] for r in needed],
            category,
        )
    if kind == "value":
        warehouse = record["warehouse"]
        needed = [r for r in records if r["category"] == category and r["warehouse"] == warehouse]
        value = sum(r["quantity"] * r["unit_price_cents"] for r in needed)
        return (
            f"What is the total value, in cents, of all {category} stock in warehouse {warehouse}?",
            value,
            [r["sku"] for r in needed],
            category,
        )
    needed = [r for r in records if r["category"] == category]
    count = sum(r["quantity"] < 100 for r in needed)
    return (
        f"How many {category} stock records (SKUs) hold fewer than 100 units?",
        count,
        [r["sku"] for r in needed],
        category,
    )


class InventoryEnv(ToolEnv):
    """Query a warehouse database with tools and answer with a number."""

    task_prefix = "inv"
    instructions = "Answer the question about the company's inventory. The data is only available through the tools."

    def __init__(
        self,
        flaky_rate: float = 0.0,
        tool_parser: str = "hermes",
        max_turns: int = 8,
        **common: Any,
    ) -> None:
        if not 0.0 <= flaky_rate < 1.0:
            raise ValueError(f"flaky_rate must be in [0, 1), got {flaky_rate}")
        self.flaky_rate = flaky_rate
        super().__init__(
            config={"flaky_rate": flaky_rate},
            tool_parser=tool_parser,
            max_turns=max_turns,
            **common,
        )

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        records = _world(rng)
        question, answer, needed, category = _question(rng, records)
        return Task(
            task_id=task_id,
            prompt=f"{question} Categories: {', '.join(sorted({r['category'] for r in records}))}.",
            answer=str(answer),
            family="inventory",
            difficulty=len(needed),
            solution=f"From the records, the answer is $\\boxed{{{answer}}}$.",
            data={"records": records, "needed": needed, "category": category},
        )

    def initial_episode(self, task: Task) -> dict[str, Any]:
        return {"searched": [], "known": []}

    def state_key_data(self) -> dict[str, Any]:
        """What was searched and fetched, as sets: the order of the calls decides nothing."""
        return {key: sorted(set(values)) for key, values in self.episode.items()}

    @tool("List the SKUs, names and warehouses of the items in a category.", category="string")
    def search_items(self, category: str) -> ToolResult:
        found = [
            {"sku": r["sku"], "name": r["name"], "warehouse": r["warehouse"]}
            for r in self.task.data["records"] if r["category"] == category.strip().lower()
        ]  # fmt: skip
        if not found:
            return ToolResult(f"error: no category {category!r}", "tool_error")
        self.episode["searched"].append(category.strip().lower())
        return ToolResult(json.dumps(found))

    @tool(
        "Get the full stock record of one SKU: quantity, warehouse and unit price in cents.",
        sku="string",
    )
    def get_item(self, sku: str) -> ToolResult:
        if self.flaky_rate and self.np_random.random() < self.flaky_rate:
            return ToolResult("error: the inventory service is busy; retry the call", "tool_error")
        for record in self.task.data["records"]:
            if record["sku"] == sku.strip().upper():
                if record["sku"] not in self.episode["known"]:
                    self.episode["known"].append(record["sku"])
                return ToolResult(json.dumps(record))
        return ToolResult(f"error: unknown SKU {sku!r}", "tool_error")

    def gold_action(self) -> str:
        data = self.task.data
        if data["category"] not in self.episode["searched"]:
            return self.format_call("search_items", category=data["category"])
        missing = [sku for sku in data["needed"] if sku not in self.episode["known"]]
        if missing:
            return "\n".join(
                self.format_call("get_item", sku=sku) for sku in missing[: self.max_calls_per_turn]
            )
        return self.task.solution or f"$\\boxed{{{self.task.answer}}}$"
