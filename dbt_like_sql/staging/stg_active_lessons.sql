-- One row per learner and lesson: the platform's progress record, renamed, with a derived status.
-- The ActiveLesson resource carries no status (only the callbacks do), so it is derived from its fields:
--   succeeded    stats.success is true (achieved stands in when stats.success is absent)
--   failed       not succeeded, and progress reached 100 %
--   in-progress  not succeeded, some progress
--   not-started  no progress (a lesson assigned but never opened still has a startDate: the assignment)
with

source as (

    select * from {{ source('lms', 'active_lessons') }}

),

renamed as (

    select
        owner_id,
        user_id,
        lesson_id,
        title as lesson_title,
        start_date as started_at,
        last_date as last_activity_at,
        stats_progress_in_percent as progress_percent,
        score,
        success_rate,
        time_spent,
        stats_nb_correct_answers as correct_answers,
        stats_nb_incorrect_answers as incorrect_answers,
        stats_validation_threshold as validation_threshold,
        stats_success as is_success,
        achieved as is_achieved,
        version as lesson_version,
        case
            when coalesce(stats_success, achieved, false) then 'succeeded'
            when stats_progress_in_percent >= 100 then 'failed'
            when stats_progress_in_percent > 0 then 'in-progress'
            else 'not-started'
        end as status,
        first_loaded_at,
        last_loaded_at

    from source

)

select * from renamed
