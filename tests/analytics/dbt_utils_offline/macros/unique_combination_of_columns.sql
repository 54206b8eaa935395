{# dbt_utils.unique_combination_of_columns: rows whose combination of the given columns is not unique. #}
{% test unique_combination_of_columns(model, combination_of_columns, quote_columns=false) %}

{%- if quote_columns -%}
    {%- set columns = [] -%}
    {%- for column in combination_of_columns -%}
        {%- do columns.append(adapter.quote(column)) -%}
    {%- endfor -%}
{%- else -%}
    {%- set columns = combination_of_columns -%}
{%- endif -%}

with validation_errors as (

    select {{ columns | join(', ') }}
    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1

)

select * from validation_errors

{% endtest %}
