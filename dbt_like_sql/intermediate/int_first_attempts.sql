-- One row per progress record (active lesson) and question of its entry or exit quiz: the verdict of the first
-- attempt at it (its answer with the lowest attempt_index), its answers over all attempts, and its latest answer's
-- time and title. What question_difficulty counts, kept so that a build recomputes only the records that changed.
-- Incremental (dbt's delete+insert on the record and question): once the table exists, a build recomputes only the
-- progress records with an answer loaded after the newest load the table was computed from (_loaded_at), each from
-- all of its answers. Every row a load writes carries the load's commit time, and loads commit one after another,
-- so a row loaded since has a later time.
{{ config(materialized='incremental', unique_key=['active_lesson_id', 'quiz_type', 'question_id']) }}

with

-- NOT MATERIALIZED: an incremental build reads it twice, which would copy every answer first
answers as not materialized (

    select * from {{ ref('stg_answers') }}

),

{% if is_incremental() %}

    computed_through as (

        select coalesce(max(_loaded_at), cast('-infinity' as timestamptz)) as loaded_at

        from {{ this }}

    ),

    changed_records as (

        select distinct answers.active_lesson_id

        from answers

        cross join computed_through

        where answers.last_loaded_at > computed_through.loaded_at

    ),

{% endif %}

-- what this build computes: every record on a full build, the changed records on an incremental one
answers_to_compute as (

    select answers.*

    from answers

    {% if is_incremental() %}
        inner join changed_records using (active_lesson_id)
    {% endif %}

),

-- attempt_index is unique per record, quiz and question (the key of the answer); a record belongs to one lesson,
-- so grouping by lesson_id too makes the same groups, and keeps it without any_value()
final as (

    select
        active_lesson_id,
        lesson_id,
        quiz_type,
        question_id,
        arg_min({ 'is_correct': is_correct }, attempt_index).is_correct as first_is_correct,
        count(*) as answers,
        max(answered_at) as last_answered_at,
        arg_max(question_title, answered_at) as last_title,
        max(last_loaded_at) as _loaded_at

    from answers_to_compute

    group by active_lesson_id, lesson_id, quiz_type, question_id

)

select * from final
