"""The by-type dispatcher behind `decide` and `evolve`: exact type first, then the nearest registered base."""

from __future__ import annotations

import pytest

from domain.dispatch import ByType


class Animal:
    pass


class Dog(Animal):
    pass


class Puppy(Dog):
    pass


class Stone:
    pass


def _speaker() -> ByType[str]:
    speak: ByType[str] = ByType("speak", "nothing to say for {name}")

    @speak.register
    def _(it: Animal, loud: bool) -> str:
        return "ANIMAL" if loud else "animal"

    @speak.register
    def _(it: Dog, loud: bool) -> str:
        return "WOOF" if loud else "woof"

    return speak


def test_the_function_of_the_exact_type_answers_and_the_rest_of_the_arguments_reach_it() -> None:
    speak = _speaker()
    assert speak(Animal(), False) == "animal"
    assert speak(Dog(), True) == "WOOF"


def test_a_subclass_without_a_function_of_its_own_gets_its_nearest_base_s_and_is_not_said_to_be_handled() -> None:
    speak = _speaker()
    assert speak(Puppy(), False) == "woof"
    assert speak(Puppy(), True) == "WOOF"  # (now remembered: the same answer)
    assert speak.handles(Dog) and not speak.handles(Puppy)


def test_an_unknown_type_is_refused_by_name_and_a_second_function_for_one_type_is_refused() -> None:
    speak = _speaker()
    with pytest.raises(TypeError, match="nothing to say for Stone"):
        speak(Stone(), False)
    with pytest.raises(TypeError, match="speak already has a function for Dog"):
        @speak.register
        def _(it: Dog, loud: bool) -> str:
            return "again"
