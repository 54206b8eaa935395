"""`--select` widened to whole multi-assets (assets fetched together cannot run apart), and a selection that
matches nothing is a clear error."""

import pytest
from dagster import AssetSelection

from pipeline.defs.code_location import build_definitions
from pipeline.defs.selection import widen_to_whole_multi_assets
from pipeline.settings import load_settings


def test_one_asset_of_a_multi_asset_brings_its_neighbours_and_says_which():
    defs = build_definitions(load_settings())
    groups = widen_to_whole_multi_assets(defs, ["key:lms/groups"])
    assert groups.added == {"lms/groups": ["lms/group_members", "lms/users"]}
    keys = AssetSelection.from_string(" or ".join(f"({s})" for s in groups.select)).resolve(defs.resolve_asset_graph())
    assert {k.to_user_string() for k in keys} == {"lms/groups", "lms/group_members", "lms/users"}
    assert groups.keys == sorted(keys)
    whole = widen_to_whole_multi_assets(defs, ["group:progress"])
    assert whole.added == {} and whole.select == ["group:progress"]


def test_a_selection_matching_nothing_names_itself():
    with pytest.raises(ValueError, match="'key:lms/nope' matches no asset"):
        widen_to_whole_multi_assets(build_definitions(load_settings()), ["key:lms/nope"])
