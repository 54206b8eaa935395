-- A share of a count: numerator / denominator, null when the denominator is 0 (no division by zero, and no
-- rate at all rather than a rate of 0 when nothing was counted). Both arguments are SQL expressions.
{% macro rate(numerator, denominator) -%}
    ({{ numerator }}) / nullif({{ denominator }}, 0)
{%- endmacro %}
