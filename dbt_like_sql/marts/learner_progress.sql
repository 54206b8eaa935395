-- Learner progress per lesson: one row per learner and lesson the learner has a progress record for.
-- attempts and best_score come from the exit quiz: an attempt is one attempt_index with at least one
-- exit-quiz answer; its score is the percentage of its decided answers that are correct (undecided,
-- i.e. pending review, are left out); best_score is the best attempt's score.
-- Incremental (dbt's delete+insert on the learner and lesson): once the table exists, a build recomputes only the
-- pairs whose progress record, answers or lesson were loaded after the newest load the table was computed from
-- (_loaded_at), each pair from all of its rows. Every row a load writes carries the load's commit time, and loads
-- commit one after another, so a row loaded since has a later time.
{{ config(materialized='incremental', unique_key=['user_id', 'lesson_id']) }}

with

-- NOT MATERIALIZED: an incremental build reads these twice, which would copy every row first (question_difficulty)
active_lessons as not materialized (

    select * from {{ ref('stg_active_lessons') }}

),

answers as not materialized (

    select * from {{ ref('stg_answers') }}

),

lessons as (

    select * from {{ ref('stg_lessons') }}

),

catalogue_changes as (

    select * from {{ ref('stg_lesson_loads') }}

),

{% if is_incremental() %}

    computed_through as (

        select coalesce(max(_loaded_at), cast('-infinity' as timestamptz)) as loaded_at

        from {{ this }}

    ),

    changed_pairs as (

        select
            active_lessons.user_id,
            active_lessons.lesson_id

        from active_lessons

        cross join computed_through

        where active_lessons.last_loaded_at > computed_through.loaded_at

        union

        select
            answers.user_id,
            answers.lesson_id

        from answers

        cross join computed_through

        where answers.last_loaded_at > computed_through.loaded_at

        union

        select
            active_lessons.user_id,
            active_lessons.lesson_id

        from active_lessons

        inner join catalogue_changes
            on active_lessons.lesson_id = catalogue_changes.lesson_id

        cross join computed_through

        where catalogue_changes.changed_at > computed_through.loaded_at

    ),

{% endif %}

-- what this build computes: every pair on a full build, the changed pairs on an incremental one
progress_to_compute as (

    select active_lessons.*

    from active_lessons

    {% if is_incremental() %}
        inner join changed_pairs using (user_id, lesson_id)
    {% endif %}

),

answers_to_compute as (

    select answers.*

    from answers

    {% if is_incremental() %}
        inner join changed_pairs using (user_id, lesson_id)
    {% endif %}

),

exit_attempts as (

    select
        user_id,
        lesson_id,
        attempt_index,
        count(*) as answers,
        count(is_correct) as decided,
        count(*) filter (where is_correct) as correct,
        max(last_loaded_at) as loaded_at

    from answers_to_compute

    where quiz_type = 'exit'

    group by user_id, lesson_id, attempt_index

),

exit_attempts_per_learner_lesson as (

    select
        user_id,
        lesson_id,
        count(*) as attempts,
        cast(sum(answers) as bigint) as exit_answers,
        max(100.0 * correct / nullif(decided, 0)) as best_score,
        max(loaded_at) as loaded_at

    from exit_attempts

    group by user_id, lesson_id

),

final as (

    select
        active_lessons.user_id,
        active_lessons.lesson_id,
        coalesce(lessons.lesson_title, active_lessons.lesson_title) as lesson_title,
        active_lessons.status,
        active_lessons.progress_percent,
        active_lessons.score,
        exit_attempts_per_learner_lesson.best_score,
        coalesce(exit_attempts_per_learner_lesson.attempts, 0) as attempts,
        coalesce(exit_attempts_per_learner_lesson.exit_answers, 0) as exit_answers,
        active_lessons.time_spent,
        active_lessons.started_at,
        active_lessons.last_activity_at,
        greatest(
            active_lessons.last_loaded_at, exit_attempts_per_learner_lesson.loaded_at, catalogue_changes.changed_at
        ) as _loaded_at

    from progress_to_compute as active_lessons

    left join exit_attempts_per_learner_lesson
        on
            active_lessons.user_id = exit_attempts_per_learner_lesson.user_id
            and active_lessons.lesson_id = exit_attempts_per_learner_lesson.lesson_id

    left join lessons
        on active_lessons.lesson_id = lessons.lesson_id

    left join catalogue_changes
        on active_lessons.lesson_id = catalogue_changes.lesson_id

)

select * from final
