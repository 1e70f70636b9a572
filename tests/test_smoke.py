"""The server answers who the caller is."""

from tests.conftest import Org


async def test_viewer_names_org_role_and_permissions(org: Org) -> None:
    data = await org.viewer.data("{ viewer { org { name } role permissions } }")
    assert data["viewer"]["org"]["name"] == org.name
    assert data["viewer"]["role"] == "VIEWER"
    assert "space:view" in data["viewer"]["permissions"]
    assert "space:create" not in data["viewer"]["permissions"]
