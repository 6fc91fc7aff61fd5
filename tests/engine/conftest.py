"""Engine fixtures: games that are closed at the end of the test."""

from __future__ import annotations

import pytest

from moonbox.engine import Game


@pytest.fixture
def make_game():
    made: list[Game] = []

    def make(**options) -> Game:
        options.setdefault("seed", 7)
        game = Game(**options)
        made.append(game)
        return game

    yield make
    for game in made:
        game.close()


@pytest.fixture
def game(make_game) -> Game:
    return make_game()

