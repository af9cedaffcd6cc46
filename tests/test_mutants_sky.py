"""Exact values, messages and edges of ingest.sky.bands that its other fast tests left unchecked:
each test here kills mutants that survived `bash scripts/mutation.sh sky/bands` (docs/testing.md)."""
import math

import astropy.units as u
import numpy as np
import pytest

from ingest.errors import ConfigError
from ingest.sky.bands import (ChannelRange, SpectralRange, bare_number, degrees_text, parse_band,
                              parse_channels, readable, rest_frequency_hz)


def message_of(call, *args):
    with pytest.raises(ConfigError) as info:
        call(*args)
    return str(info.value)


# --- readable / degrees_text / bare_number ---

def test_readable_and_degrees_write_negative_zero_as_zero():
    assert readable(-0.0) == "0"
    assert readable([-0.0, 1.5], "", " ") == "0 1.5"
    assert degrees_text(-1e-7) == "0"  # rounds to -0.000000, written "0"
    assert degrees_text(-0.0) == "0"


def test_readable_takes_the_larger_unit_from_exactly_its_factor():
    assert readable(1e9, "Hz") == "1 GHz"
    assert readable(1e3, "m/s") == "1 km/s"


def test_bare_number_is_none_for_nan():
    assert bare_number("nan") is None
    assert bare_number("-inf") == -math.inf


# --- parse_band ---

def test_parse_band_reads_commas_as_separators():
    band = parse_band("1.417GHz,1.4185GHz")
    assert (band.lo, band.hi, band.unit) == (1.417, 1.4185, "GHz")
    band = parse_band("1.417GHz, 1.4185GHz")
    assert (band.lo, band.hi, band.unit) == (1.417, 1.4185, "GHz")


def test_parse_band_joins_a_unit_word_whose_second_letter_is_not_a_letter():
    band = parse_band("1200 m/s 1500 m/s")
    assert (band.lo, band.hi, band.unit, band.kind) == (1200.0, 1500.0, "m/s", "velocity")


def test_parse_band_refuses_a_bare_number_beside_a_value_with_a_unit():
    assert message_of(parse_band, "1400 1500km/s") == (
        "band '1400 1500km/s': give both values with units, or two numbers and one unit after them")


def test_parse_band_names_an_unknown_unit_word():
    expected = ("'foo' is neither a unit nor a velocity convention (radio, optical, relativistic)")
    assert message_of(parse_band, "1 2 foo") == f"band '1 2 foo': {expected}"
    assert message_of(parse_band, "1.4 GHz 1.5 foo") == f"band '1.4 GHz 1.5 foo': {expected}"


def test_parse_band_names_a_unit_of_the_wrong_kind_once():
    assert message_of(parse_band, "1 2 kg") == (
        "band '1 2 kg': unit 'kg' is not a frequency, wavelength or velocity")


def test_parse_band_rest_value_is_everything_after_the_first_equals_sign():
    # '1420MHz=1' is no frequency; reading only '1420MHz' or only '1' would accept it
    assert "rest frequency '1420MHz=1'" in message_of(parse_band, "1200km/s 1500km/s rest=1420MHz=1")


def test_parse_channels_takes_a_channels_prefix():
    assert parse_channels("CHANNELS 3 7") == ChannelRange(3, 7)
    assert parse_channels("channels 3 7") == ChannelRange(3, 7)


# --- rest frequency ---

def test_rest_frequency_text_may_hold_spaces():
    assert rest_frequency_hz("1420 M Hz") == 1.42e9
    assert rest_frequency_hz("1 420MHz") == 1.42e9
    assert rest_frequency_hz("21.106114cm") == pytest.approx(1.4204e9, rel=1e-4)
    assert rest_frequency_hz(None) is None


# --- ChannelRange ---

def test_channel_range_takes_numpy_integers_as_python_ints():
    channels = ChannelRange(np.int64(3), np.int64(5))
    assert (channels.lo, channels.hi) == (3, 5)
    assert type(channels.lo) is int and type(channels.hi) is int


def test_channel_range_message_and_dict():
    assert message_of(ChannelRange, 5, 2) == "channel range 5 2: need 0 <= lo <= hi (0-based, inclusive)"
    assert ChannelRange(3, 5).as_dict() == {"shape": "channels", "lo": 3, "hi": 5, "text": "CHANNEL 3 5"}


# --- SpectralRange checks ---

@pytest.mark.parametrize("lo, hi", [(math.nan, 1.0), (1.0, math.nan)])
def test_spectral_range_refuses_one_nan(lo, hi):
    assert message_of(SpectralRange, lo, hi, "GHz", "frequency").endswith(": a value is not a number")


def test_spectral_range_messages_name_the_band():
    assert message_of(SpectralRange, 1, 2, "kg", "frequency") == (
        "band 1 2 kg: unit 'kg' is not a frequency, wavelength or velocity")
    assert message_of(SpectralRange, 1, 2, "GHz", "wavelength") == (
        "band 1 2 GHz: kind 'wavelength' does not match unit 'GHz' (a frequency)")
    assert message_of(SpectralRange, 1, 2, "km/s", "velocity", "doppler") == (
        "band 1 2 km/s: velocity convention 'doppler' is not one of radio, optical, relativistic")
    assert message_of(SpectralRange, 1, 2, "km/s", "velocity", None, 0) == (
        "band 1 2 km/s: rest frequency 0 Hz must be positive")


def test_spectral_range_refuses_exactly_the_speed_of_light():
    assert message_of(SpectralRange, 0.0, 299_792_458.0, "m/s", "velocity").endswith(
        ": a velocity must be below the speed of light")


def test_spectral_range_open_sides():
    band = SpectralRange(1.0, math.inf, "GHz", "frequency")
    assert (band.lo, band.hi) == (1.0, math.inf)
    assert "must be positive" in message_of(SpectralRange, -math.inf, -math.inf, "GHz", "frequency")


@pytest.mark.parametrize("rest_hz", [math.inf, -1.0, 0.0])
def test_spectral_range_refuses_a_rest_frequency_not_positive_and_finite(rest_hz):
    assert "must be positive" in message_of(SpectralRange, 1, 2, "km/s", "velocity", None, rest_hz)


def test_spectral_range_stores_normalised_unit_and_float_rest():
    band = SpectralRange(1, 2, "km / s", "velocity", None, "1420000000")
    assert band.unit == "km/s"
    assert band.rest_hz == 1.42e9 and type(band.rest_hz) is float
    assert SpectralRange(1, 2, "km/s", "velocity", None, 0.5).rest_hz == 0.5


def test_spectral_range_as_dict_exact():
    assert SpectralRange(1.0, math.inf, "GHz", "frequency").as_dict() == {
        "shape": "band", "lo": 1.0, "hi": None, "unit": "GHz", "kind": "frequency",
        "convention": None, "rest_hz": None, "text": "BAND 1 inf GHz"}


def test_spectral_range_describe_for_people_with_rest():
    band = SpectralRange(1200, 1500, "km/s", "velocity", None, 1420405752.0)
    assert band.describe(for_people=True) == "BAND 1200 1500 km/s radio rest=1.420405752 GHz"
    assert band.describe() == "BAND 1200 1500 km/s radio rest=1420405752Hz"


# --- SpectralRange.between ---

def test_between_defaults_to_radio():
    assert SpectralRange.between(1200 * u.km / u.s, 1500 * u.km / u.s).convention == "radio"


def test_between_messages():
    assert message_of(SpectralRange.between, 1 * u.GHz, 2).endswith(
        ": give both ends as astropy Quantities with units")
    assert message_of(SpectralRange.between, 1 * u.kg, 2 * u.kg) == (
        "band 1.0 kg 2.0 kg: unit 'kg' is not a frequency, wavelength or velocity")
