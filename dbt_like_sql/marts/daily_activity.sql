-- Daily learning activity, per UTC calendar day with any activity:
-- answers given (by answer time), distinct learners and lessons answered, correct answers,
-- lessons started (by start date), certificates completed (by completion date).
with

answers as (

    select * from {{ ref('stg_answers') }}

),

active_lessons as (

    select * from {{ ref('stg_active_lessons') }}

),

certificates as (

    select * from {{ ref('stg_certificates') }}

),

-- narrows millions of answers to (day, learner, lesson) before the distinct counts
answers_per_learner_lesson_day as (

    select
        cast(timezone('UTC', answered_at) as date) as activity_date,
        user_id,
        lesson_id,
        count(*) as answers,
        count(*) filter (where is_correct) as correct_answers

    from answers

    where answered_at is not null

    group by 1, 2, 3

),

answers_per_day as (

    select
        activity_date,
        cast(sum(answers) as bigint) as answers,
        cast(sum(correct_answers) as bigint) as correct_answers,
        count(distinct user_id) as active_learners,
        count(distinct lesson_id) as lessons_answered

    from answers_per_learner_lesson_day

    group by 1

),

starts_per_day as (

    select
        cast(timezone('UTC', started_at) as date) as activity_date,
        count(*) as lessons_started

    from active_lessons

    where started_at is not null

    group by 1

),

certificates_per_day as (

    select
        cast(timezone('UTC', completed_at) as date) as activity_date,
        count(*) as certificates_completed

    from certificates

    where completed_at is not null

    group by 1

),

days as (

    select activity_date from answers_per_day
    union
    select activity_date from starts_per_day
    union
    select activity_date from certificates_per_day

),

final as (

    select
        days.activity_date,
        coalesce(answers_per_day.answers, 0) as answers,
        coalesce(answers_per_day.correct_answers, 0) as correct_answers,
        coalesce(answers_per_day.active_learners, 0) as active_learners,
        coalesce(answers_per_day.lessons_answered, 0) as lessons_answered,
        coalesce(starts_per_day.lessons_started, 0) as lessons_started,
        coalesce(certificates_per_day.certificates_completed, 0) as certificates_completed

    from days

    left join answers_per_day using (activity_date)
    left join starts_per_day using (activity_date)
    left join certificates_per_day using (activity_date)

)

select * from final
order by 1
