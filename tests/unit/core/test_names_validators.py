"""apimachinery's name, label and annotation validators (``gpustack_core.names``), in its words.

Expected messages are apimachinery's ``IsDNS1123Label``, ``IsDNS1123Subdomain``,
``IsDNS1035Label``, ``IsQualifiedName`` and ``IsValidLabelValue`` (``RegexError`` writes the
examples with ``',  or '`` between them); the accept/refuse verdicts are also checked against
``gpustack_core.features``' independent label regexes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.features import is_label_key, is_label_value
from gpustack_core.names import (
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

QUALIFIED_REGEX = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"


def test_a_label_value_refused_in_apimachinery_s_words() -> None:
    assert label_value_errors("a/b") == [
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
        f"'my_value',  or '12345', regex used for validation is '({QUALIFIED_REGEX})?')"
    ]
    assert label_value_errors("x" * 64) == ["must be no more than 63 characters"]
    assert label_value_errors("") == []


def test_a_qualified_name_names_the_part_it_refuses() -> None:
    name_part = (
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
        f"used for validation is '{QUALIFIED_REGEX}')"
    )
    assert qualified_name_errors("bad key") == [name_part]
    assert qualified_name_errors("example.com/") == ["name part must be non-empty", name_part]
    assert qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert qualified_name_errors("Example.com/x")[0].startswith(
        "prefix part a lowercase RFC 1123 subdomain must consist of"
    )
    assert qualified_name_errors("x" * 64) == ["name part must be no more than 63 characters"]
    assert qualified_name_errors("a/b/c")[0].startswith("a qualified name must consist of")
    assert qualified_name_errors("example.com/Name_1.x") == []


def test_names_by_kind() -> None:
    assert dns1035_label_errors("a.b") == [
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
        "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
        "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
    ]
    assert dns1035_label_errors("a" * 70) == ["must be no more than 63 characters"]
    assert dns1035_label_errors("1abc") != []
    assert dns1123_label_errors("1abc") == []
    assert dns1123_label_errors("a.b") == ["must not contain dots"]
    assert dns1123_subdomain_errors("a.b") == []
    assert dns1123_subdomain_errors("a..b") == [
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
        "[a-z0-9])?)*')"
    ]
    assert dns1123_subdomain_errors("a" * 254) == ["must be no more than 253 characters"]


_LABELISH = st.text(alphabet="aZ09-_./ ", max_size=20)


@given(_LABELISH)
def test_the_verdicts_agree_with_the_feature_labels_regexes(text: str) -> None:
    assert (not label_value_errors(text)) == is_label_value(text)
    assert (not qualified_name_errors(text)) == is_label_key(text)
