-- Learner progress per lesson: one row per learner and lesson the learner has a progress record for.
-- attempts and best_score come from the exit quiz: an attempt is one attempt_index with at least one
-- exit-quiz answer; its score is the percentage of its decided answers that are correct (undecided,
-- i.e. pending review, are left out); best_score is the best attempt's score.
with

active_lessons as (

    select * from {{ ref('stg_active_lessons') }}

),

answers as (

    select * from {{ ref('stg_answers') }}

),

lessons as (

    select * from {{ ref('stg_lessons') }}

),

exit_attempts as (

    select
        user_id,
        lesson_id,
        attempt_index,
        count(*) as answers,
        count(is_correct) as decided,
        count(*) filter (where is_correct) as correct

    from answers

    where quiz_type = 'exit'

    group by user_id, lesson_id, attempt_index

),

exit_attempts_per_learner_lesson as (

    select
        user_id,
        lesson_id,
        count(*) as attempts,
        cast(sum(answers) as bigint) as exit_answers,
        max(100.0 * correct / nullif(decided, 0)) as best_score

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
        active_lessons.last_activity_at

    from active_lessons

    left join exit_attempts_per_learner_lesson
        on
            active_lessons.user_id = exit_attempts_per_learner_lesson.user_id
            and active_lessons.lesson_id = exit_attempts_per_learner_lesson.lesson_id

    left join lessons
        on active_lessons.lesson_id = lessons.lesson_id

)

select * from final
