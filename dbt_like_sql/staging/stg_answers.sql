-- One row per answer (every attempt, entry and exit quizzes), with a single correctness verdict.
-- is_correct, first rule that applies:
--   1. validation.isForcedValid is true (an admin or coach forced it valid)  -> correct
--   2. validation.feedback.status is valid / invalid (a person reviewed it)  -> correct / incorrect
--   3. validation.feedback.status is pending (review not done yet)            -> NULL (undecided)
--   4. isValid (the platform's automatic check)                               -> its value
--   5. nothing known                                                          -> NULL (undecided)
-- isForcedValid false is read as "not forced", not as "forced invalid", so it decides nothing by itself.
with

source as (

    select * from {{ source('lms', 'answers') }}

),

renamed as (

    select
        active_lesson_id,
        user_id,
        lesson_id,
        quiz_type,
        cast(attempt_index as bigint) as attempt_index,
        question_id,
        question_title,
        lesson_version,
        last_date as answered_at,
        start_time_stamp,
        end_time_stamp,
        is_valid,
        validation_feedback_status as feedback_status,
        validation_feedback_title as feedback_title,
        validation_forced_validation_type as forced_validation_type,
        validation_is_forced_valid as is_forced_valid,
        case
            when validation_is_forced_valid then true
            when validation_feedback_status = 'valid' then true
            when validation_feedback_status = 'invalid' then false
            when validation_feedback_status = 'pending' then null
            else is_valid
        end as is_correct,
        case
            when validation_is_forced_valid then 'forced'
            when validation_feedback_status in ('valid', 'invalid', 'pending') then 'feedback'
            when is_valid is not null then 'automatic'
            else 'unknown'
        end as correctness_basis,
        first_loaded_at,
        last_loaded_at

    from source

)

select * from renamed
