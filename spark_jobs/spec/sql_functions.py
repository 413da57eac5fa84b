"""Which Spark SQL functions a circuit may call, and why the others are refused.

The incremental rules apply a row expression (``select``, ``filter``, an aggregate argument)
to each change once, row by row (linear operators, Theorem 3.3 of the DBSP paper). That is only
right when the expression is a pure function of the row: the same row must always give the same
value, wherever and whenever it is computed. So the catalog is an **allow-list** of Spark's
deterministic, side-effect-free scalar functions, grouped in families; every other name is
refused, UDFs and catalog functions included, with a reason when the name is a known hazard:

- code: ``reflect``, ``java_method``, ``try_reflect`` call Java methods (load native code,
  read the environment);
- files: ``input_file_name`` & co. and ``from_protobuf``/``to_protobuf`` (descriptor files);
- environment: the current user, catalog, database, version: results would depend on where a
  step runs;
- nondeterminism: ``rand``, ``uuid``, ``shuffle``, ``monotonically_increasing_id``, ...;
- clocks: ``current_timestamp``, ``now``, ``current_date``, ``unix_timestamp()``, ...;
- windows: ``lag``, ``rank``, ... (and ``OVER``), time windows ``window``/``session_window``;
- aggregates (``sum``, ``count``, ...) outside an ``aggregate`` node; generators (``explode``).

Names are Spark's own, lower-case (Spark matches function names case-insensitively). The
catalog is shared by the checker on sqlglot's parse (``sql_check.py``, at validation) and the
check on Spark's own parse before a step runs (``spark_jobs/executor/spark/parse_check.py``);
a future whole-query node (``op: sql``) reuses both.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import AGGREGATE_FUNCS

_FAMILIES: dict[str, str] = {
    "conditional": """
        coalesce if ifnull nanvl nullif nullifzero nvl nvl2 zeroifnull equal_null decode case when
        between in like ilike rlike regexp regexp_like isnan isnull isnotnull not and or""",
    "conversion": """
        cast try_cast bigint binary boolean date decimal double float int smallint string
        timestamp tinyint time typeof""",
    "math": """
        abs acos acosh asin asinh atan atan2 atanh bin bround cbrt ceil ceiling conv cos cosh cot
        csc degrees div e exp expm1 factorial floor greatest hex hypot least ln log log10 log1p
        log2 mod negative pi pmod positive pow power radians rint round sec sign signum sin sinh
        sqrt tan tanh try_add try_divide try_mod try_multiply try_subtract unhex width_bucket""",
    "bitwise": "bit_count bit_get getbit shiftleft shiftright shiftrightunsigned",
    "string": """
        ascii base64 bit_length btrim char char_length character_length chr concat concat_ws
        contains elt encode endswith find_in_set format_number format_string initcap instr
        is_valid_utf8 lcase left len length levenshtein locate lower lpad ltrim luhn_check
        make_valid_utf8 mask octet_length overlay position printf quote regexp_count
        regexp_extract regexp_extract_all regexp_instr regexp_replace regexp_substr repeat replace
        right rpad rtrim soundex space split split_part startswith substr substring
        substring_index to_binary to_char to_number to_varchar translate trim try_to_binary
        try_to_number try_validate_utf8 ucase unbase64 upper validate_utf8""",
    "date and time": """
        add_months convert_timezone date_add date_diff date_format date_from_unix_date date_part
        date_sub date_trunc dateadd datediff datepart day dayname dayofmonth dayofweek dayofyear
        extract from_unixtime from_utc_timestamp hour last_day make_date make_dt_interval
        make_interval make_time make_timestamp make_timestamp_ltz make_timestamp_ntz
        make_ym_interval minute month monthname months_between next_day quarter second time_diff
        time_from_micros time_from_millis time_from_seconds time_to_micros time_to_millis
        time_to_seconds time_trunc timestamp_micros timestamp_millis timestamp_seconds
        timestampadd timestampdiff to_date to_time to_timestamp to_timestamp_ltz
        to_timestamp_ntz to_unix_timestamp to_utc_timestamp trunc try_make_interval
        try_make_timestamp try_make_timestamp_ltz try_make_timestamp_ntz try_to_date try_to_time
        try_to_timestamp unix_date unix_micros unix_millis unix_seconds unix_timestamp weekday
        weekofyear year""",
    "array": """
        array array_append array_compact array_contains array_distinct array_except array_insert
        array_intersect array_join array_max array_min array_position array_prepend array_remove
        array_repeat array_size array_union arrays_overlap arrays_zip cardinality element_at
        flatten get reverse sequence size slice sort_array try_element_at""",
    "map": """
        map map_concat map_contains_key map_entries map_from_arrays map_from_entries map_keys
        map_values str_to_map""",
    "struct": "named_struct struct",
    "higher-order (lambda)": """
        aggregate array_sort exists filter forall map_filter map_zip_with reduce transform
        transform_keys transform_values zip_with""",
    "hash": "crc32 hash md5 sha sha1 sha2 xxhash64",
    "json, csv and url": """
        from_json get_json_object json_array_length json_object_keys schema_of_json to_json
        from_csv schema_of_csv to_csv parse_url try_parse_url try_url_decode url_decode
        url_encode""",
}

ALLOWED: dict[str, str] = {name: family for family, names in _FAMILIES.items() for name in names.split()}

# Families as shown to users (docs/reference/expressions.md, messages): family -> a few examples.
FAMILY_EXAMPLES: dict[str, str] = {family: ", ".join(names.split()[:6]) for family, names in _FAMILIES.items()}

CODE = "calls Java methods by reflection: a circuit may not run code"
FILES = "reads files: a circuit reads only its declared inputs"
ENVIRONMENT = ("reads the environment of the session (user, catalog, version): a view would depend on "
               "where a step runs")
NONDETERMINISTIC = ("is nondeterministic: each change is computed once, when it arrives, so the view would "
                    "differ from the query over the whole input")
CLOCK = ("reads the clock: each change is computed once, at the time it arrives, so the view would not "
         "equal the query over the whole input; no operator for views over the current time exists "
         "yet (compare with a literal, e.g. ts >= timestamp '2024-01-01')")
WINDOW = ("is a window function: it compares a row with other rows, which a row expression cannot "
          "see; use an 'aggregate' node for per-group results (and its 'window' for windows over time)")
TIME_WINDOW = ("is a time window, which an expression cannot compute; use an 'aggregate' node with window: "
               "{column: ts, size: \"1 hour\"} (and slide: for sliding windows), or an sql node's GROUP BY "
               "window(ts, '1 hour')")
GENERATOR = ("is a generator (one row in, many rows out), not a row expression: a select computes one "
             "row per row")
RAISES = "raises an error on purpose: to stop bad data, use an expectation with policy fail"
AGGREGATE = "aggregate function in a row expression; use an aggregate node"

REFUSED: dict[str, str] = {
    **dict.fromkeys(("reflect", "java_method", "try_reflect"), CODE),
    **dict.fromkeys(("input_file_name", "input_file_block_start", "input_file_block_length",
                     "from_protobuf", "to_protobuf"), FILES),
    **dict.fromkeys(("current_user", "user", "session_user", "current_catalog", "current_database",
                     "current_schema", "current_path", "current_timezone", "version"), ENVIRONMENT),
    **dict.fromkeys(("rand", "randn", "random", "uniform", "randstr", "uuid", "shuffle",
                     "monotonically_increasing_id", "spark_partition_id", "aes_encrypt"), NONDETERMINISTIC),
    **dict.fromkeys(("current_timestamp", "current_date", "current_time", "curdate", "now",
                     "localtimestamp"), CLOCK),
    **dict.fromkeys(("lag", "lead", "rank", "dense_rank", "percent_rank", "row_number", "ntile",
                     "cume_dist", "nth_value", "first_value", "last_value"), WINDOW),
    **dict.fromkeys(("window", "session_window", "window_time", "time_bucket"), TIME_WINDOW),
    **dict.fromkeys(("explode", "explode_outer", "posexplode", "posexplode_outer", "inline",
                     "inline_outer", "stack", "json_tuple"), GENERATOR),
    **dict.fromkeys(("raise_error", "assert_true"), RAISES),
}

# Spark's aggregate functions (any of them in a row expression gets AGGREGATE, not "unknown").
SPARK_AGGREGATES = frozenset("""
    any any_value approx_count_distinct approx_percentile array_agg avg bit_and bit_or bit_xor
    bool_and bool_or collect_list collect_set corr count count_if count_min_sketch covar_pop
    covar_samp every first grouping grouping_id histogram_numeric kurtosis last listagg max
    max_by mean median min min_by mode percentile percentile_approx percentile_cont
    percentile_disc regr_avgx regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx
    regr_sxy regr_syy skewness some std stddev stddev_pop stddev_samp string_agg sum try_avg
    try_sum var_pop var_samp variance""".split()) | frozenset(AGGREGATE_FUNCS)

# Names Spark reads as a function when written without parentheses (and no column has the name).
BARE_FUNCTIONS = frozenset({"current_date", "current_timestamp", "current_time", "current_user", "user",
                            "session_user", "localtimestamp", "current_catalog", "current_database",
                            "current_schema"})

# ``unix_timestamp()`` without arguments is the clock; with a value it converts that value.
NEEDS_ARGUMENTS = frozenset({"unix_timestamp", "to_unix_timestamp"})


@dataclass(frozen=True)
class Verdict:
    """What the catalog says about one function name: allowed (with its family) or why not."""

    name: str
    family: str | None = None  # set when allowed
    reason: str | None = None  # set when refused

    @property
    def allowed(self) -> bool:
        return self.family is not None


def verdict(name: str, arguments: int | None = None) -> Verdict:
    """The catalog's verdict on calling ``name`` (any case) with ``arguments`` arguments."""
    low = name.lower()
    if low in NEEDS_ARGUMENTS and arguments == 0:
        return Verdict(low, reason=CLOCK)
    if low in ALLOWED:
        return Verdict(low, family=ALLOWED[low])
    if low in REFUSED:
        return Verdict(low, reason=REFUSED[low])
    if low in SPARK_AGGREGATES:
        return Verdict(low, reason=AGGREGATE)
    return Verdict(low, reason="is not an allowed function: only Spark's deterministic built-in "
                               "functions are allowed (no UDFs or catalog functions); see "
                               "docs/reference/expressions.md")
