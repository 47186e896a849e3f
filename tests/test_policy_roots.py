import pytest
from pydantic import ValidationError
from bot.policy_settings import PolicySettings

@pytest.mark.parametrize("root", ["memory", "groups/other", "notes/MEMORY.md", ".", "../x", "/etc"])
def test_a_root_the_file_tools_would_ignore_is_refused_at_load(root):
    with pytest.raises(ValidationError):
        PolicySettings.model_validate({"groups": {"telegram:-100": {"roots": [root]}}})

def test_a_shared_folder_root_is_accepted():
    p = PolicySettings.model_validate({"groups": {"telegram:-100": {"roots": ["shared/team"]}}})
    assert p.groups["telegram:-100"].roots == ["shared/team"] or tuple(p.groups["telegram:-100"].roots) == ("shared/team",)
