-- The build's reference instant, as a TIMESTAMPTZ expression: what time-relative models read for "now".
-- The project variable as_of is, under dbt, what `--vars` gives: a date, meaning midnight UTC (2026-11-02), or a
-- timestamp with a UTC offset (2026-11-02 00:00:00+00, 2026-11-02T00:00:00Z), each cast here; or a SQL
-- expression of type TIMESTAMPTZ, used as it is (dbt_project.yml's default current_timestamp). LessonSync's runner
-- gives the DuckDB variable each build sets (getvariable('as_of')), an expression too.
{% macro as_of() -%}
    {%- set value = var('as_of') | string | trim -%}
    {%- set offset = value[10:] -%}
    {%- if not (value[:4].isdigit() and value[4:5] == '-') -%}
        {{ value }}
    {%- elif value | length == 10 -%}
        cast('{{ value | replace("'", "''") }} 00:00:00+00' as timestamptz)
    {%- elif 'Z' in offset or 'z' in offset or '+' in offset or '-' in offset -%}
        cast('{{ value | replace("'", "''") }}' as timestamptz)
    {%- else -%}
        {{ exceptions.raise_compiler_error("as_of '" ~ value ~ "' has no UTC offset; add Z or +hh:mm") }}
    {%- endif -%}
{%- endmacro %}
