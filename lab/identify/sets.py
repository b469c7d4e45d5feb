"""The identification benchmark's sets as the lab's emulations read them (bench/identify/score.py's
loaders): SETS (default /tmp/acc-full) -> the manifest by query, the item of each reference file,
and the grouped view (references sharing content count as one item)."""
import importlib.util
import os

spec = importlib.util.spec_from_file_location(
    "score", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "identify", "score.py"))
score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(score)


def load(sets=None):
    """(manifest, item_of, view) of the sets at `sets` (default $SETS or /tmp/acc-full)."""
    sets = sets or os.environ.get("SETS", "/tmp/acc-full")
    manifest = {score.qkey(r["query"]): r for r in score.read_csv(os.path.join(sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in score.read_csv(os.path.join(sets, "groups.csv"))}
    view = score.View(score.content_links(os.path.join(sets, "siblings.csv"), item_of, 14))
    return manifest, item_of, view
