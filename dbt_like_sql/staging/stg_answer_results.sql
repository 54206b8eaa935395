-- One row per result of an answer (a chosen option, a typed text or number, a picture), current rows only.
with

source as (

    select * from {{ source('lms', 'answer_results') }}

),

renamed as (

    select
        active_lesson_id,
        quiz_type,
        cast(attempt_index as bigint) as attempt_index,
        question_id,
        result_index,
        type as result_type,
        label_name,
        value_number,
        value_text,
        position_left,
        position_top

    from source
    where deleted_at is null

)

select * from renamed
