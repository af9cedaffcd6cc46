"""Exact values, messages and edges of ingest.sky.regions that its other fast tests left unchecked:
each test here kills mutants that survived `bash scripts/mutation.sh sky/regions` (docs/testing.md).
Polygon verdicts are checked against an independent oracle: great-circle arcs crossing, found
with cross products on the sphere, not with the gnomonic projection the code uses."""
import math

import astropy.units as u
import numpy as np
import pytest
from astropy.coordinates import SkyCoord

from ingest.errors import ConfigError
from ingest.sky.regions import SkyCircle, SkyPolygon, SkyRange, parse_pos


def message_of(call, *args):
    with pytest.raises(ConfigError) as info:
        call(*args)
    return str(info.value)


def unit_vector(lon_deg, lat_deg):
    lon, lat = np.radians([lon_deg, lat_deg])
    return np.array([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)])


def first_crossing(vertices):
    """(edge, edge), 1-based, of the first two edges that share no vertex and whose great-circle
    arcs cross (each arc's ends on opposite sides of the other's great circle), or None."""
    v = [unit_vector(*p) for p in vertices]
    k = len(v)
    for i in range(k):
        for j in range(i + 2, k):
            if i == 0 and j == k - 1:
                continue
            a, b, c, d = v[i], v[(i + 1) % k], v[j], v[(j + 1) % k]
            n1, n2 = np.cross(a, b), np.cross(c, d)
            if np.sign(n1 @ c) != np.sign(n1 @ d) and np.sign(n2 @ a) != np.sign(n2 @ b):
                return i + 1, j + 1
    return None


# --- the stored values: floats, longitudes in [0, 360) ---

def test_regions_store_plain_floats_with_longitudes_brought_into_0_360():
    circle = SkyCircle(-10, 1, 2)
    assert (circle.lon_deg, circle.lat_deg, circle.radius_deg) == (350.0, 1.0, 2.0)
    assert all(type(v) is float for v in (circle.lon_deg, circle.lat_deg, circle.radius_deg))
    assert SkyCircle(370.5, 0, 1).lon_deg == 10.5
    wrap = SkyRange(350, 370, -5, 5)
    assert (wrap.lon_min_deg, wrap.lon_max_deg, wrap.lat_min_deg, wrap.lat_max_deg) == (350.0, 10.0, -5.0, 5.0)
    assert SkyRange(200, 250, 0, 1).lon_min_deg == 200.0 and SkyRange(200, 250, 0, 1).lon_max_deg == 250.0
    assert SkyPolygon(((-1, 0), (1, 0), (0, 1))).vertices_deg == ((359.0, 0.0), (1.0, 0.0), (0.0, 1.0))


@pytest.mark.parametrize("text, expected", [
    ("RANGE 0 360 0 1", (0.0, 360.0, 0.0, 1.0)),      # a full circle of longitude
    ("RANGE 10 -Inf 0 1", (0.0, 360.0, 0.0, 1.0)),    # an open side, whichever it is
    ("RANGE +Inf 10 0 1", (0.0, 360.0, 0.0, 1.0)),
    ("RANGE 0 10 -Inf 0", (0.0, 10.0, -90.0, 0.0)),   # an open latitude side is the pole
    ("RANGE 0 10 -Inf +Inf", (0.0, 10.0, -90.0, 90.0)),
])
def test_open_and_full_range_sides_are_the_whole_coordinate(text, expected):
    r = parse_pos(text)
    assert (r.lon_min_deg, r.lon_max_deg, r.lat_min_deg, r.lat_max_deg) == expected


def test_latitude_and_radius_edges_are_exact():
    assert SkyCircle(0, 90, 180).radius_deg == 180.0 and SkyCircle(0, -90, 1).lat_deg == -90.0
    assert message_of(SkyCircle, 0.0, 0.0, 0.0) == "circle at (0.0, 0.0): radius 0.0 deg must be > 0 and at most 180"
    assert message_of(SkyCircle, 0.0, 0.0, 180.5) == "circle at (0.0, 0.0): radius 180.5 deg must be > 0 and at most 180"
    assert message_of(SkyCircle, 0.0, 90.5, 1.0) == "circle at (0.0, 90.5): latitude 90.5 deg is outside -90..90"
    assert message_of(SkyCircle, 0.0, -90.5, 1.0) == "circle at (0.0, -90.5): latitude -90.5 deg is outside -90..90"


@pytest.mark.parametrize("args, message", [
    ((math.nan, 1, 0, 1), "range nan..1.0 by 0.0..1.0 deg: a longitude is not a number"),
    ((1, math.nan, 0, 1), "range 1.0..nan by 0.0..1.0 deg: a longitude is not a number"),
    ((0, 10, 20, 10), "range 0.0..10.0 by 20.0..10.0 deg: the latitude range is reversed (give the lower latitude first)"),
    ((0, 10, -100, 10), "range 0.0..10.0 by -100.0..10.0 deg: latitude -100.0 deg is outside -90..90"),
    ((0, 10, 0, 100), "range 0.0..10.0 by 0.0..100.0 deg: latitude 100.0 deg is outside -90..90"),
    ((0, 10, math.inf, math.inf), "range 0.0..10.0 by inf..inf deg: latitude inf deg is outside -90..90"),
])
def test_range_refusals_name_the_range(args, message):
    assert message_of(SkyRange, *args) == message


@pytest.mark.parametrize("vertices, message", [
    (((0, 0), (1, 1)), "polygon (0, 0) (1, 1): a polygon needs at least 3 vertices, got 2"),
    # a closed ring of two vertices written out is two vertices, not a triangle of no area
    (((0, 0), (1, 1), (0, 0)), "polygon (0, 0) (1, 1): a polygon needs at least 3 vertices, got 2"),
    (((0, 95), (1, 0), (0, 1)), "polygon (0, 95) (1, 0) (0, 1): latitude 95.0 deg is outside -90..90"),
])
def test_polygon_refusals_name_the_vertices(vertices, message):
    assert message_of(SkyPolygon, vertices) == message


# --- text written back ---

def test_describe_for_people_rounds_to_a_millionth_of_a_degree():
    assert SkyCircle(150.123456789, -30.25, 0.04).describe(True) == "CIRCLE icrs 150.123457 -30.25 0.04 deg"
    assert SkyRange(150.123456789, 151, -30.25, -30).describe(True) == "RANGE icrs 150.123457 151 -30.25 -30 deg"
    assert SkyPolygon(((150.123456789, 1), (151, 1), (151, 2))).describe(True) == "POLYGON icrs 150.123457 1 151 1 151 2 deg"


def test_as_dict_names_the_shape_and_every_field():
    assert SkyCircle(1, 2, 3).as_dict() == {"shape": "circle", "lon_deg": 1.0, "lat_deg": 2.0, "radius_deg": 3.0,
                                            "frame": "icrs", "text": "CIRCLE icrs 1 2 3 deg"}
    assert SkyRange(1, 2, 3, 4).as_dict() == {"shape": "range", "lon_min_deg": 1.0, "lon_max_deg": 2.0,
                                              "lat_min_deg": 3.0, "lat_max_deg": 4.0, "frame": "icrs",
                                              "text": "RANGE icrs 1 2 3 4 deg"}
    assert SkyPolygon(((1, 2), (3, 4), (3, 2)), "galactic").as_dict() == {
        "shape": "polygon", "vertices_deg": [[1.0, 2.0], [3.0, 4.0], [3.0, 2.0]], "frame": "galactic",
        "text": "POLYGON galactic 1 2 3 4 3 2 deg"}


# --- polygons: hemisphere and crossing edges ---

HEMISPHERE = ("spans a hemisphere or more (a vertex lies 90 deg or more from the vertices' mean "
              "direction); split it into smaller polygons")


@pytest.mark.parametrize("vertices", [
    ((0, 0), (120, 0), (240, 0)),        # round the equator
    ((45, -45), (180, 0), (315, 45)),    # round a great circle: their directions sum to exactly nothing
])
def test_polygons_round_a_great_circle_span_a_hemisphere(vertices):
    assert message_of(SkyPolygon, vertices).endswith(": " + HEMISPHERE)


def test_a_polygon_just_inside_a_hemisphere_is_kept():
    # every vertex 89.9999 deg from the pole, the vertices' mean direction
    triangle = ((0, 1e-4), (120, 1e-4), (240, 1e-4))
    assert SkyPolygon(triangle).vertices_deg == tuple((float(a), b) for a, b in triangle)


@pytest.mark.parametrize("vertices", [
    # concave arrowheads, the reflex vertex first or last: the line through one edge cuts the
    # opposite edge, but the edges themselves do not meet
    ((10, 10), (10.4, 10.2), (10, 10.4), (10.1, 10.2)),
    ((10.1, 10.2), (10, 10), (10.4, 10.2), (10, 10.4)),
    # a large concave quadrilateral, where the gnomonic projection stretches the far vertices
    ((-50, -40), (50, -35), (30, 10), (40, -15)),
    # a square round the north pole; the same vertices round the equator at lon 0
    ((10.5, 80), (55.5, 80), (190.5, 80), (235.5, 80)),
    ((12.5, 5), (347.5, 5), (347.5, -5), (12.5, -5)),
])
def test_polygons_whose_edges_do_not_cross_are_kept(vertices):
    assert first_crossing(vertices) is None
    assert len(SkyPolygon(vertices).vertices_deg) == len(vertices)


def crossing_message(vertices, first, second):
    k = len(vertices)
    return (f"edge {first} (vertex {first} to {first % k + 1}) crosses edge {second} (vertex {second} to "
            f"{second % k + 1}); give the vertices in order round the polygon")


@pytest.mark.parametrize("vertices, edges", [
    (((0, 0), (1, 1), (1, 0), (0, 1)), (1, 3)),
    (((1, 1), (1, 0), (0, 1), (0, 0)), (2, 4)),  # the last edge, back to vertex 1
    # bow ties whose vertices' mean direction is exactly the pole, or exactly (lon 0, lat 0)
    (((10.5, 80), (190.5, 80), (55.5, 80), (235.5, 80)), (1, 3)),
    (((10.5, 10), (190.5, 10), (55.5, 10), (235.5, 10)), (1, 3)),
    (((12.5, 5), (347.5, -5), (347.5, 5), (12.5, -5)), (1, 3)),
])
def test_crossing_edges_are_named(vertices, edges):
    assert first_crossing(vertices) == edges
    assert message_of(SkyPolygon, vertices).endswith(": " + crossing_message(vertices, *edges))


@pytest.mark.parametrize("vertices, edges", [
    # vertex 4 lies on edge 1 (all on the equator) and the outline passes through it there:
    # edges that touch count as crossing, and the first pair that meets is named
    (((0, 0), (4, 0), (3, 2), (2, 0), (1, -2)), (1, 3)),
    # the same outline from vertex 3: vertex 2 lies on edge 4
    (((3, 2), (2, 0), (1, -2), (0, 0), (4, 0)), (1, 4)),
])
def test_an_edge_through_a_vertex_counts_as_crossing(vertices, edges):
    assert message_of(SkyPolygon, vertices).endswith(": " + crossing_message(vertices, *edges))


# --- parse_pos: messages and units ---

@pytest.mark.parametrize("text, message", [
    ("circle 1deg 2deg 3 furlong", "'furlong' is not an angle unit (deg, arcmin, arcsec)"),
    ("circle fk5 J2010 galactic 1 2 3", "'galactic' is not an angle unit (deg, arcmin, arcsec)"),
    ("circle 1deg 2deg inf deg", "'inf deg' is infinite; an open RANGE side is a bare -Inf or +Inf"),
    ("circle 150.1 -30.2 2.4arcmin deg", "the unit word 'deg' follows '2.4arcmin', which is not a bare number; "
                                         "write each angle once, e.g. 2.4arcmin or 2.4 arcmin"),
    ("RANGE 1 2 3", "RANGE takes 4 values (lon_min lon_max lat_min lat_max), got 3"),
    ("CIRCLE 150 95 0.1", "circle at (150.0, 95.0): latitude 95.0 deg is outside -90..90"),
    ("POLYGON 0 0 120 0 240 0", "polygon (0, 0) (120, 0) (240, 0): " + HEMISPHERE),
    ("POLYGON 0 0 1 0 0 0", "polygon (0, 0) (1, 0): a polygon needs at least 3 vertices, got 2"),
])
def test_position_messages_are_exact(text, message):
    assert message_of(parse_pos, text) == f"position {text!r}: {message}"


def test_hours_are_read_for_every_longitude_and_only_there():
    assert math.isclose(parse_pos("circle 10 hourangle -30 deg 1 deg").lon_deg, 150.0)
    polygon = parse_pos("polygon 10:00:00 -30:00:00 10:02:00 -30:00:00 10:01:00 -29:30:00")
    assert np.allclose(polygon.vertices_deg, ((150.0, -30.0), (150.5, -30.0), (150.25, -29.5)))
    polygon = parse_pos("polygon 10h00m -30d 10h02m -30d 10h01m -29.5d")
    assert polygon.vertices_deg == ((150.0, -30.0), (150.5, -30.0), (150.25, -29.5))


def test_skycoord_refusals_name_what_was_given():
    assert message_of(SkyCircle.around, (1, 2), 1 * u.deg) == "sky position (1, 2): expected an astropy SkyCoord"
    pair = SkyCoord([1, 2] * u.deg, [3, 4] * u.deg)
    assert message_of(SkyCircle.around, pair, 1 * u.deg).endswith(": expected one position, got (2,) of them")
