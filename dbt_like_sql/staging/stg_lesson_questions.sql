-- Quiz questions of the catalogue: one row per question slot (lesson, notion, quiz, position).
-- question_id is not in the platform's spec; it is filled when the platform sends it (the simulator does).
with

source as (

    select * from {{ source('lms', 'lesson_questions') }}

),

renamed as (

    select
        lesson_id,
        notion_index,
        notion_title,
        quiz as quiz_type,
        question_index,
        question_id,
        question_title,
        question_type,
        question_allowed_attempts as allowed_attempts

    from source
    where deleted_at is null

)

select * from renamed
