"""mod.toml: validation errors name the file, the field and the line."""

from __future__ import annotations

import pytest

from moonbox.mods import ModError, parse_manifest


def test_a_full_manifest_parses():
    m = parse_manifest('id = "waves"\nname = "Waves"\nversion = "1.2.0"\n'
                       'description = "Spawns waves."\nauthor = "ann"\nentry = "src/main.lua"\n'
                       'dependencies = ["scoreboard"]\n'
                       '[permissions]\nmode = "auto"\nrules = { "coreai_world_*" = "ask" }\n',
                       "mods/waves/mod.toml")
    assert m.id == "waves" and m.entry == "src/main.lua"
    assert m.dependencies == ["scoreboard"]
    assert m.permissions.rules == {"coreai_world_*": "ask"}


def test_defaults_ask_for_little():
    m = parse_manifest('id = "a"\n', "f")
    assert m.entry == "main.lua" and m.permissions.mode == "readonly"
    assert m.title == "a"


@pytest.mark.parametrize("text, field, line", [
    ('id = "Bad Id"\n', "id", 1),
    ('id = "a"\nversion = 3\n', "version", 2),
    ('id = "a"\nentry = "main.py"\n', "entry", 2),
    ('id = "a"\ncolour = "red"\n', "colour", 2),
    ('id = "a"\ndependencies = ["ok", "NOT OK"]\n', "dependencies.1", 2),
    ('id = "a"\n\n[permissions]\nmode = "root"\n', "permissions.mode", 3),
    ('name = "x"\n', "id", None),
])
def test_errors_name_file_field_and_line(text, field, line):
    with pytest.raises(ModError) as info:
        parse_manifest(text, "mods/a/mod.toml")
    err = info.value
    assert err.code == "invalid_manifest" and err.field == field and err.line == line
    assert str(err).startswith("mods/a/mod.toml")
    assert repr(field) in str(err)


def test_toml_syntax_error_names_the_line():
    with pytest.raises(ModError) as info:
        parse_manifest('id = "a"\nversion = \n', "mods/a/mod.toml")
    assert info.value.line == 2 and "mods/a/mod.toml:2" in str(info.value)


def test_a_manifest_that_breaks_the_parser_is_an_invalid_manifest():
    text = 'id = "a"\nx = ' + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(ModError) as info:
        parse_manifest(text, "mods/a/mod.toml")
    assert info.value.code == "invalid_manifest" and "mods/a/mod.toml" in str(info.value)
